"""Figures drawn from what the cluster recorded (trace events, ledger timelines), never from formulas.

One colour per memory kind, format and chunk across all of them (palette.py). None of them picks a
matplotlib backend: in a notebook they show inline, and `zerosim figures` writes them as PNGs.
"""

from zerosim.viz.activations_figure import l_squared_figure, strategies_figure
from zerosim.viz.dataflow_figure import dataflow_figure
from zerosim.viz.ledger_figure import ledger_figure, stage_peaks_figure
from zerosim.viz.loss_scale_figure import clip_figure, loss_scale_figure
from zerosim.viz.memory_figure import memory_by_stage_figure
from zerosim.viz.ownership_figure import ownership_figure
from zerosim.viz.peak_figure import peak_by_stage_figure
from zerosim.viz.recipe_figure import recipe_figure
from zerosim.viz.ring_figure import ring_figure, ring_steps_figure
from zerosim.viz.spacing_figure import spacing_figure
from zerosim.viz.sweep_figure import sweep_figure
from zerosim.viz.timeline_figure import timeline_figure, timelines_figure
from zerosim.viz.underflow_figure import underflow_figure, underflow_panels
from zerosim.viz.wire_figure import drift_figure, wire_loss_figure, wire_time_figure
from zerosim.viz.zero3_figure import zero3_figure

__all__ = [
    "clip_figure",
    "dataflow_figure",
    "drift_figure",
    "l_squared_figure",
    "ledger_figure",
    "stage_peaks_figure",
    "loss_scale_figure",
    "memory_by_stage_figure",
    "ownership_figure",
    "peak_by_stage_figure",
    "recipe_figure",
    "ring_figure",
    "ring_steps_figure",
    "spacing_figure",
    "strategies_figure",
    "sweep_figure",
    "timeline_figure",
    "timelines_figure",
    "underflow_figure",
    "underflow_panels",
    "wire_loss_figure",
    "wire_time_figure",
    "zero3_figure",
]
