"""The default backend: all N ranks live in this process; a send is handing over a reference.

Because every rank is here, `exchange` needs no copy: the receiver reads the sender's array. The
ring algorithms never write to an array after sending it within the same step, so this is safe and
it keeps the simulator close to the speed of plain numpy.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from zerosim.backends._base import HostArrays


class NumpyBackend(HostArrays):
    name = "numpy"
    sends_by_reference = True  # every rank is here: the collectives may add chunk by chunk instead of hop by hop

    POOL_BYTES = 1 << 30  # at most this much freed storage is kept for reuse (1 GiB)

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.local_ranks = list(range(world_size))
        self._pool = {}  # nbytes -> [flat uint8 storage]
        self._pooled = 0  # bytes held in the pool
        self._lock = threading.Lock()  # Cluster(workers=k): ranks allocate and free from k threads at once

    def empty(self, shape, dtype) -> np.ndarray:
        """Storage for a ledger buffer, reusing freed storage of the same size when there is some.

        NOTE: fresh large arrays cost a page fault per 4 KiB on first touch; a collective allocates
        its working buffers on every call, so reuse is what keeps the simulated ring near numpy's speed.
        """
        dtype = np.dtype(dtype)
        nbytes = math.prod((shape,) if isinstance(shape, (int, np.integer)) else shape) * dtype.itemsize
        with self._lock:
            free = self._pool.get(nbytes)
            storage = free.pop() if free else None
            if storage is not None:
                self._pooled -= nbytes
        if storage is not None:
            return storage.view(dtype).reshape(shape)
        return np.empty(shape, dtype=dtype)

    def recycle(self, array: np.ndarray) -> None:
        """Take back the storage of a freed ledger buffer (the ledger no longer hands it out)."""
        if not (isinstance(array, np.ndarray) and array.flags.c_contiguous):
            return
        with self._lock:
            if 0 < array.nbytes <= self.POOL_BYTES - self._pooled:
                self._pool.setdefault(array.nbytes, []).append(array.reshape(-1).view(np.uint8))
                self._pooled += array.nbytes

    def exchange(self, sends, send_to, recv_from, recv_like=None) -> list:
        received = []
        for dst, src in enumerate(recv_from):
            if src is None:
                received.append(None)
            elif send_to[src] == dst and sends[src] is not None:
                received.append(sends[src])  # every rank is here: hand over the reference
            else:
                raise RuntimeError(f"rank {dst} waits for a message from rank {src} that was never sent")
        if recv_like is not None:  # the promise the MPI backend relies on, checked here where every rank is at hand
            for dst, (array, like) in enumerate(zip(received, recv_like)):
                if like is not None and (array.size != like[0] or array.dtype != like[1]):
                    raise RuntimeError(f"rank {dst} expected {like[0]} {np.dtype(like[1])} elements but was sent "
                                       f"{array.size} {array.dtype}")
        return received

    def all_meta(self, items) -> list:
        return list(items)

    def to_numpy(self, array) -> np.ndarray:
        return np.asarray(array)
