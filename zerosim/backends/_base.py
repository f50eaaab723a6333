"""The backend protocol: what a cluster needs from the machine underneath it.

A backend hosts some ranks of a world (all of them in the numpy simulator, one per process under
MPI, one per GPU under CuPy/NCCL) and offers three things:

- `empty(shape, dtype)`: storage on the rank's device;
- `exchange(sends, send_to, recv_from, recv_like=None)`: every local rank sends one array to one peer
  and receives one array from another, all at once (a ring step). Received arrays are read-only and
  valid until the next exchange. `recv_like[i]` is the (count, dtype) local rank i is about to receive
  (None where it receives nothing): the ring always knows it, and MPI then needs no probe;
- `all_meta(items)`: every rank's small description of its input (lengths, dtypes), so that bad input
  is caught on every rank before any data moves;
- `count_nonfinite(array)` / `all_finite(array)`: how many NaN/inf an array holds, read where the
  array lives (the meta backend's arrays hold no values, so none);
- `read_scalar(array, default)`: the first element of a small array as a Python float on the host (the
  overflow flag and the gradient norm, as DeepSpeed's `.item()` reads them); `default` where the
  backend holds no values (`holds_values` False: the meta backend);
- `asarray(array, dtype)`: a host array (initial weights) as this backend's array of `dtype`: numpy's
  conversion, or a data-less array of the same shape on the meta backend (nothing read, nothing allocated);
- `evaluate(fn, array, default)`: `fn` of the array's values on the host (a shard's sum of squares), or
  `default` where the backend holds none — so callers never ask which backend they run on;
- `available_bytes()`: the memory a new buffer can get (None: no limit applies, as on the meta backend),
  so engines refuse a run that cannot fit before allocating any of it;
- `xp`: the `zerosim.precision.cast._arrays.ArrayNamespace` its arrays belong to (NumPy on the host; CuPy with
  bf16 stored as uint16 on a GPU): the ring allocates, casts and adds with it, so a device's arrays stay there.

A backend may also run a collective's data movement itself: `reduce_scatter_phase(cluster, staged,
op, wire, bounds, call)` and `all_gather_phase(cluster, shards, bounds, total, wire, call)`, in place
of the ring's (the meta backend records what the ring would send without moving anything; MPI's
`native=True` calls MPI's own reduce-scatter).

The ring algorithms in `zerosim.collectives` are written against this protocol only, so they run
unchanged on every backend.
"""

from __future__ import annotations

import os
from typing import Protocol, Sequence

import numpy as np

from zerosim.precision.cast import NUMPY, ArrayNamespace


class Backend(Protocol):
    name: str
    world_size: int
    local_ranks: list  # global indices of the ranks this process hosts
    holds_values: bool  # False: arrays with shape and dtype only (meta)
    xp: ArrayNamespace  # where its arrays live and how formats are stored there (NUMPY on the host)

    def empty(self, shape, dtype) -> np.ndarray: ...

    def exchange(
        self, sends: Sequence, send_to: Sequence, recv_from: Sequence, recv_like: Sequence | None = None
    ) -> list: ...

    def all_meta(self, items: Sequence) -> list: ...

    def count_nonfinite(self, array) -> int: ...

    def all_finite(self, array) -> bool: ...

    def to_numpy(self, array) -> np.ndarray: ...

    def read_scalar(self, array, default: float) -> float: ...

    def evaluate(self, fn, array, default): ...

    def asarray(self, array, dtype): ...


def count_nonfinite(array) -> int:
    """NaN and inf elements of a host array of any format (16-bit and fp8 widened exactly first)."""
    a = np.asarray(array)
    if a.dtype.kind in "iub":
        return 0
    if a.dtype.kind != "f":  # bf16 and fp8 (ml_dtypes): fp32 holds each of their values exactly
        a = a.astype(np.float32)
    return int(a.size - np.count_nonzero(np.isfinite(a)))


def available_bytes() -> int | None:
    """Host memory the kernel says a new allocation can get (MemAvailable), or None when it cannot tell."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


class HostArrays:
    """What backends whose arrays live in host memory share (numpy, MPI; CuPy in its default "host" mode)."""

    holds_values = True
    xp = NUMPY  # host memory, every format its own dtype (ml_dtypes)

    def available_bytes(self) -> int | None:
        """Bytes a new allocation can get on this process's host (None: unknown)."""
        return available_bytes()

    def count_nonfinite(self, array) -> int:
        return count_nonfinite(self.to_numpy(array))

    def all_finite(self, array) -> bool:
        return self.count_nonfinite(array) == 0

    def read_scalar(self, array, default: float) -> float:
        """The first element of `array`, on the host, as a Python float (`default` is for data-less backends)."""
        return float(np.asarray(self.to_numpy(array), dtype=np.float64).reshape(-1)[0])

    def evaluate(self, fn, array, default):
        """`fn` of the array's values, on the host (`default` is for data-less backends)."""
        return fn(self.to_numpy(array))

    def asarray(self, array, dtype):
        """`array` as a host array of `dtype` (itself when it is one already)."""
        return np.asarray(array, dtype=dtype)
