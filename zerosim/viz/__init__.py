"""Figures drawn from what the cluster recorded (trace events, ledger timelines), never from formulas."""

from zerosim.viz.ledger_figure import ledger_figure
from zerosim.viz.memory_figure import memory_by_stage_figure
from zerosim.viz.ring_figure import ring_figure

__all__ = ["ledger_figure", "memory_by_stage_figure", "ring_figure"]
