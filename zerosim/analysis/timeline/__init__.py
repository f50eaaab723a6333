"""Time on the recorded events: each rank's compute and communication streams, overlap, prefetch.

    from zerosim.analysis.timeline import Hardware, simulate, write_chrome_trace
    result = simulate(cluster.trace, Hardware("h100", "nvlink4", "fp16"))   # after engine.step(...)
    result.step_time, result.exposed_comm, result.busy_fraction()
    write_chrome_trace(result, "step.json")                                 # open in ui.perfetto.dev

    _devices.py       V100, A100 (40/80 GB), H100, H200, RTX 3090 (dense peak rates, HBM bandwidth); links from costs
    _cost.py          ring collective (α-β), roofline compute, memory-bound optimizer step
    _simulate.py      the discrete-event pass over the log
    _result.py        Timeline: intervals per (rank, stream), step time, exposed communication
    _chrome_trace.py  Chrome / Perfetto trace-event JSON
    _kernel_time.py   the calibrated compute model: each kernel class at its achieved rate (TimeModel)
    _window.py        one step of a log apart: each stream's busy time in it, and what compute did not cover

The planner (which stage, strategy and micro-batch to run) is zerosim.analysis.planner, on top of this.
"""

from zerosim.analysis.timeline._chrome_trace import chrome_trace_events, write_chrome_trace
from zerosim.analysis.timeline._cost import (
    compute_time,
    equal_chunk_bytes,
    optimizer_bytes_per_element,
    optimizer_time,
    phase_time,
    ring_collective_time,
)
from zerosim.analysis.timeline._devices import A100_80GB_SXM, DEVICES, H100_SXM, Device, Hardware, get_device, get_link
from zerosim.analysis.timeline._kernel_time import KernelTimes, TimeModel
from zerosim.analysis.timeline._result import STREAMS, Interval, Timeline, category
from zerosim.analysis.timeline._simulate import simulate
from zerosim.analysis.timeline._window import StepWindow, step_window

__all__ = [
    "KernelTimes", "TimeModel",
    "A100_80GB_SXM", "DEVICES", "Device", "H100_SXM", "Hardware", "Interval", "STREAMS", "Timeline", "category",
    "chrome_trace_events", "compute_time", "get_device", "get_link", "optimizer_bytes_per_element", "optimizer_time",
    "phase_time", "ring_collective_time", "simulate", "write_chrome_trace", "StepWindow", "step_window",
    "equal_chunk_bytes",
]
