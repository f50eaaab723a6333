"""Figures drawn from what the cluster recorded (trace events, ledger timelines), never from formulas.

One colour per memory kind, format and chunk across all of them (_palette.py). None of them picks a
matplotlib backend: in a notebook they show inline, and `zerosim figures` writes them as PNGs (_slides.py: the same
figures at slide size). One file per figure, named for what it draws (_memory.py: memory_by_stage_figure, ...).
"""

from zerosim.viz._activations import l_squared_figure, strategies_figure
from zerosim.viz._dataflow import dataflow_figure
from zerosim.viz import _glossary as glossary
from zerosim.viz._fit import fit_figure
from zerosim.viz._ledger import ledger_figure, stage_peaks_figure
from zerosim.viz._loss_scale import clip_figure, loss_scale_figure
from zerosim.viz._many_nodes import many_nodes_figure
from zerosim.viz._memory import memory_by_stage_figure
from zerosim.viz._offload_step import offload_step_figure
from zerosim.viz._mesh_ownership import measure_mesh_ownership, mesh_ownership_figure
from zerosim.viz._ownership import measure_ownership, ownership_figure
from zerosim.viz._palette import chunk_colour, format_colour, kind_colour, kind_label, kind_order, wire_colour
from zerosim.viz._peak import at_peak, mlp_runs, peak_by_stage_figure
from zerosim.viz._plan import plan_figure
from zerosim.viz._recipe import recipe_figure
from zerosim.viz._ring import ring_figure, ring_steps_figure
from zerosim.viz._schedule import measure_schedule, schedule_figure
from zerosim.viz._slides import enlarge_text, slides_style, stage_frames
from zerosim.viz._spacing import spacing_figure
from zerosim.viz._sweep import sweep_figure
from zerosim.viz._tensor_mesh import measure_tensor_mesh, tensor_mesh_figure
from zerosim.viz._tier_timeline import tier_rows, tier_timeline_figure
from zerosim.viz._timeline import timeline_figure, timelines_figure
from zerosim.viz._underflow import underflow_figure, underflow_panels
from zerosim.viz._wire import drift_figure, wire_loss_figure, wire_time_figure
from zerosim.viz._zero3 import zero3_figure, zero3_sequence

__all__ = [
    "at_peak", "chunk_colour", "clip_figure", "dataflow_figure", "drift_figure", "enlarge_text", "fit_figure",
    "format_colour", "glossary", "kind_colour", "kind_label", "kind_order", "l_squared_figure", "ledger_figure",
    "loss_scale_figure", "many_nodes_figure", "measure_mesh_ownership", "measure_ownership", "memory_by_stage_figure",
    "mesh_ownership_figure", "mlp_runs", "offload_step_figure", "ownership_figure", "peak_by_stage_figure",
    "plan_figure", "recipe_figure",
    "ring_figure", "ring_steps_figure",
    "measure_schedule", "schedule_figure", "slides_style", "spacing_figure", "stage_frames", "stage_peaks_figure",
    "strategies_figure", "sweep_figure", "measure_tensor_mesh", "tensor_mesh_figure", "tier_rows",
    "tier_timeline_figure", "timeline_figure", "timelines_figure",
    "underflow_figure", "underflow_panels", "wire_colour", "wire_loss_figure", "wire_time_figure", "zero3_figure",
    "zero3_sequence",
]
