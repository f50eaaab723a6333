"""Time on the recorded events: each rank's compute and communication streams, overlap, prefetch.

    devices      A100 / H100 presets (dense peak rates, HBM bandwidth), links from zerosim.costs
    cost         ring collective (α-β), roofline compute, memory-bound optimizer step
"""

from zerosim.timeline.cost import (
    compute_time,
    optimizer_bytes_per_element,
    optimizer_time,
    phase_time,
    ring_collective_time,
)
from zerosim.timeline.devices import A100_80GB_SXM, DEVICES, H100_SXM, Device, Hardware, get_device, get_link

__all__ = [
    "A100_80GB_SXM", "DEVICES", "Device", "H100_SXM", "Hardware", "compute_time", "get_device", "get_link",
    "optimizer_bytes_per_element", "optimizer_time", "phase_time", "ring_collective_time",
]
