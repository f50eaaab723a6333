"""Allocated against reserved: what PyTorch's caching allocator holds on top of what the tensors need.

zerosim's ledgers count what a step *allocates* (torch.cuda.max_memory_allocated's view). A job's footprint is
what the caching allocator has *reserved* from the driver (torch.cuda.max_memory_reserved; torchtitan logs it as
"memory", train.py at 9dec370: `device_mem_stats.max_reserved_gib`): freed blocks are cached for reuse, and a
segment that holds a live block cannot go back, so reserved >= allocated, by an amount that depends on the order
and sizes of the step's allocations. Measured ratios, reserved over allocated:

    1.024      a 78 GiB training job: "2.4 % reserved but unallocated" (vllm-project/compressed-tensors#587)
    1.05-1.3   FSDP training before and after expandable segments (meta-pytorch/torchtune#1185: 34 % less peak
               reserved with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True on the same run)
    1.8        right after FSDP1 wraps a model (pytorch/pytorch#124260: 33.5 GB allocated, 59.8 GB reserved: the
               flattening's freed copies), an initialisation transient, not a step

The default, 5 % of the allocated peak (ALLOCATOR_RESERVE), sits between the quiet steady state and the
fragmenting one; it was set before any validation point was looked at and is not fitted. With expandable segments
(PyTorch's recommended setting for FSDP) the reserve falls toward the quiet end.
"""

from __future__ import annotations

from zerosim.analysis.costs._overheads import ALLOCATOR_RESERVE


def reserved(allocated: int, reserve: float = ALLOCATOR_RESERVE) -> int:
    """Bytes the caching allocator holds for an allocated peak of `allocated`: allocated · (1 + reserve)."""
    if not 0 <= reserve < 1:
        raise ValueError(f"the allocator reserve is a fraction of the allocated peak in [0, 1), got {reserve!r}")
    return int(allocated * (1 + reserve))
