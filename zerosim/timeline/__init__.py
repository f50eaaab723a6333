"""Time on the recorded events: each rank's compute and communication streams, overlap, prefetch.

    from zerosim.timeline import Hardware, simulate, write_chrome_trace
    result = simulate(cluster.trace, Hardware("h100", "nvlink4", "fp16"))   # after engine.step(...)
    result.step_time, result.exposed_comm, result.busy_fraction()
    write_chrome_trace(result, "step.json")                                 # open in ui.perfetto.dev

    devices      A100 (40/80 GB), H100, H200, RTX 3090 (dense peak rates, HBM bandwidth); links from zerosim.costs
    cost         ring collective (α-β), roofline compute, memory-bound optimizer step
    simulate     the discrete-event pass over the log
    result       Timeline: intervals per (rank, stream), step time, exposed communication
    chrome_trace Chrome / Perfetto trace-event JSON
    sweep        one meta step per (N, stage, link); a step of K micro-steps (step_time)
    plan         the planner: stage × checkpointing strategy × micro-batch, what fits a GPU, ranked by step time
"""

from zerosim.timeline.chrome_trace import chrome_trace_events, write_chrome_trace
from zerosim.timeline.cost import (
    compute_time,
    optimizer_bytes_per_element,
    optimizer_time,
    phase_time,
    ring_collective_time,
)
from zerosim.timeline.devices import A100_80GB_SXM, DEVICES, H100_SXM, Device, Hardware, get_device, get_link
from zerosim.timeline.result import STREAMS, Interval, Timeline, category
from zerosim.timeline.simulate import simulate

__all__ = [
    "A100_80GB_SXM", "DEVICES", "Device", "H100_SXM", "Hardware", "Interval", "STREAMS", "Timeline", "category",
    "chrome_trace_events", "compute_time", "get_device", "get_link", "optimizer_bytes_per_element", "optimizer_time",
    "phase_time", "ring_collective_time", "simulate", "write_chrome_trace",
]
