"""N simulated ranks on one GPU: the numpy simulator's ways, with every rank array on the device.

    Cluster(8, backend="cupy-sim")                      # eight ranks, all on GPU 0 of this process
    Cluster(8, backend="cupy-sim", xp="numpy-standin")  # the same code path on the CPU (tests)

NCCL refuses two ranks of one communicator on one GPU, so a one-GPU machine cannot run the cupy backend
with N > 1; this backend needs no NCCL at all. Every rank lives in this process (as in the numpy
simulator), a send is handing over a reference, and the ring's additions, the casts and the per-hop
rounding run where the arrays are, through the backend's namespace (`xp`, zerosim/precision/cast/_arrays.py):
CuPy with bf16 stored as uint16 (zerosim/precision/cast/_bf16_bits.py); fp8 has no storage there and is refused.

`xp="numpy-standin"` swaps CuPy for NumPy that refuses ml_dtypes (bf16 as uint16 all the same), so the
normal test suite runs this path without a GPU and checks it against the numpy simulator bit for bit.
"""

from __future__ import annotations

import numpy as np

from zerosim.backends._base import available_bytes
from zerosim.backends.cupy._probe import BackendUnavailable
from zerosim.precision.cast import device_namespace, numpy_standin

XP_CHOICES = ("cupy", "numpy-standin")


class CupySimBackend:
    """Every rank of the world on one device; implements `zerosim.backends._base.Backend`.

    Args:
        world_size: N.
        device: the GPU (CuPy device id) that holds every rank.
        xp: ``"cupy"`` (the GPU) or ``"numpy-standin"`` (NumPy pretending to be CuPy: the same code path on the CPU).
    """

    name = "cupy-sim"
    sends_by_reference = True  # every rank is here: the collectives may add chunk by chunk (collectives/_fast.py)
    holds_values = True

    def __init__(self, world_size: int, device: int = 0, xp: str = "cupy"):
        if xp not in XP_CHOICES:
            raise ValueError(f"xp must be one of {XP_CHOICES}, got {xp!r}")
        if xp == "cupy":
            cp = _import_cupy_only()
            count = int(cp.cuda.runtime.getDeviceCount())
            if not 0 <= int(device) < count:
                raise ValueError(f"device {device} is not one of the {count} GPU(s) CuPy sees")
            cp.cuda.Device(int(device)).use()
            self.xp = device_namespace(cp, "cupy")
        else:
            self.xp = numpy_standin()
        self.world_size, self.device = world_size, int(device)
        self.local_ranks = list(range(world_size))

    def __repr__(self) -> str:
        return f"CupySimBackend(world_size={self.world_size}, xp={self.xp.name!r}, device={self.device})"

    def empty(self, shape, dtype):
        """Storage for a ledger buffer on the device (a 16-bit bf16 buffer as uint16)."""
        return self.xp.empty(shape, dtype)

    def exchange(self, sends, send_to, recv_from, recv_like=None) -> list:
        received = []
        for dst, src in enumerate(recv_from):
            if src is None:
                received.append(None)
            elif send_to[src] == dst and sends[src] is not None:
                received.append(sends[src])  # every rank is on this device: hand over the reference
            else:
                raise RuntimeError(f"rank {dst} waits for a message from rank {src} that was never sent")
        return received

    def all_meta(self, items) -> list:
        return list(items)

    def to_numpy(self, array) -> np.ndarray:
        """A host copy in the array's own format (uint16 bits come back as bf16)."""
        return self.xp.to_host(array)

    def count_nonfinite(self, array) -> int:
        return self.xp.count_nonfinite(array)

    def all_finite(self, array) -> bool:
        return self.count_nonfinite(array) == 0

    def read_scalar(self, array, default: float) -> float:
        return float(np.asarray(self.to_numpy(array), dtype=np.float64).reshape(-1)[0])

    def evaluate(self, fn, array, default):
        """`fn` of the array's values on the host (a small result: a sum of squares)."""
        return fn(self.to_numpy(array))

    def asarray(self, array, dtype):
        """A host array as this device's array of `dtype`."""
        return self.xp.from_host(np.asarray(array, dtype=dtype))

    def available_bytes(self) -> int | None:
        if self.xp.name == "cupy":
            free, _ = self.xp.xp.cuda.runtime.memGetInfo()
            return int(free)
        return available_bytes()


def _import_cupy_only():
    """CuPy and one CUDA device (no NCCL: every rank is in this process), or `BackendUnavailable`."""
    try:
        import cupy
    except Exception as e:
        raise BackendUnavailable(f"the cupy-sim backend needs CuPy (pip install -e '.[gpu]') and an NVIDIA GPU; "
                                 f"{type(e).__name__}: {e}") from e
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:
        raise BackendUnavailable(f"the cupy-sim backend needs a CUDA device; none was found: {type(e).__name__}: "
                                 f"{e}") from e
    if count < 1:
        raise BackendUnavailable("the cupy-sim backend needs a CUDA device; CuPy sees none")
    return cupy
