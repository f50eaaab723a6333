"""Synthetic tasks the models can learn, drawn from a seeded generator.

    _regression.py   make_regression, make_classification: targets from a random teacher MLP
    _sequences.py    make_sequence_task: copy, reverse or sort a string of tokens (GPT, Llama)
"""

from zerosim.models.data._regression import make_classification, make_regression
from zerosim.models.data._sequences import TASKS, answer_positions, make_sequence_task

__all__ = ["TASKS", "answer_positions", "make_classification", "make_regression", "make_sequence_task"]
