"""Teaching: a learner predicts, writes a piece of ZeRO, and the package's own checks grade it.

    from zerosim.teaching import predict
    predict("seed004-stage2-peak", 46)     # a notebook's prediction cell: how far off, and why

    _predict.py    predict / judge: a typed number against the run's answer, within a tolerance, naming the
                   misconception a known wrong answer comes from
    _questions.py  the notebooks' prediction questions, each computing its answer from zerosim
    _starter.py    what a student gets from the installed package: an assignment's starter kit, the notebooks
    _gloo_ranks.py assignment 4's harnesses: a learner's torch function on N gloo processes, every send recorded
                   (under the sandbox, run in its child: it imports nothing of zerosim's graded code)
    exercises/     six small functions (the ring's chunk index, a shard's offset, the stage-2 free, ...), each graded
                   against the oracle or the naive twin, with the first counterexample
    assignments/   four week-sized assignments with an autograder (Gradescope's results.json)
    sandbox/       where a learner's file runs: a process of its own, confined to a folder of its own, policed
                   (never zerosim's own code of what is graded), returning only values for the grader to judge,
                   each step under a time limit, its output capped, nothing it started left running

The learning path through the notebooks, commands, exercises and assignments is in the docs (docs/tutorials/).
"""

from zerosim.teaching._predict import Question, Verdict, judge, predict
from zerosim.teaching._questions import QUESTIONS
from zerosim.teaching._starter import notebook_names, write_notebooks, write_starter

__all__ = ["QUESTIONS", "Question", "Verdict", "judge", "notebook_names", "predict", "write_notebooks", "write_starter"]
