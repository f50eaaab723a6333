"""Float64 temporaries the portable products reuse instead of allocating afresh: a product's float64 sum and its
rounding test are as large as its output, and memory fresh from the system costs a page fault per 4 kB on first touch
(919k parameters in fp32 on 8 ranks: about 2,500 faults and 4-14 ms of system time per large product, more than its
GEMM). Each thread keeps its own few buffers (the cluster's workers may multiply at once), grown to the largest
product seen, up to `_MOST` elements each (64 MB of float64); a larger one is allocated as before. What a slot holds
is valid until its next use: only temporaries that never leave a kernel live here.
"""

from __future__ import annotations

import math
from _thread import _local as _thread_local  # threading.local itself, without importing threading (0.6 ms)

import numpy as np

# elements per slot kept (64 MB of float64): past this a temporary is allocated and freed as before. glibc maps a
# block over 32 MB afresh from the system every time and unmaps it when freed (glibc 2.36, this machine's,
# malloc/malloc.c `__libc_free`: the dynamic mmap threshold rises to a freed mapped chunk's size only up to
# DEFAULT_MMAP_THRESHOLD_MAX, 4 * 1024 * 1024 * sizeof(long)), so each product past that size paid its faults again:
# the widest layer of benchmarks/peers.py's 10M MLP (2048 x 2560, 5.2 million elements) took ~1,100 faults a step in
# fp32 on 4 ranks, and its float64 operand 18 ms to widen against 2; with 1 << 23, 64 faults a step, the portable
# step 2-5 % less CPU, peak RSS +20 MB (525 -> 545 MB, the native engine beside it)
_MOST = 1 << 23
_local = _thread_local()


def scratch(shape: tuple, slot: int = 0, dtype=np.float64) -> np.ndarray:
    """An uninitialised array of `shape` and `dtype`, over this thread's buffer `slot` where it fits."""
    dtype = np.dtype(dtype)
    size = math.prod(shape)
    if size > _MOST:
        return np.empty(shape, dtype)
    buffers = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = {}
    nbytes = size * dtype.itemsize
    held = buffers.get(slot)
    if held is None or held.size < nbytes:
        held = buffers[slot] = np.empty(max(nbytes, 8), np.uint8)
    return held[:nbytes].view(dtype).reshape(shape)


def clear() -> None:
    """Let this thread's buffers go (`clear_kept_operands`)."""
    _local.buffers = {}
