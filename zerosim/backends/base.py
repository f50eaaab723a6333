"""The backend protocol: what a cluster needs from the machine underneath it.

A backend hosts some ranks of a world (all of them in the numpy simulator, one per process under
MPI, one per GPU under CuPy/NCCL) and offers three things:

- `empty(shape, dtype)`: storage on the rank's device;
- `exchange(sends, send_to, recv_from, recv_like=None)`: every local rank sends one array to one peer
  and receives one array from another, all at once (a ring step). Received arrays are read-only and
  valid until the next exchange. `recv_like[i]` is the (count, dtype) local rank i is about to receive
  (None where it receives nothing): the ring always knows it, and MPI then needs no probe;
- `all_meta(items)`: every rank's small description of its input (lengths, dtypes), so that bad input
  is caught on every rank before any data moves.

The ring algorithms in `zerosim.collectives` are written against this protocol only, so they run
unchanged on every backend.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np


class Backend(Protocol):
    name: str
    world_size: int
    local_ranks: list  # global indices of the ranks this process hosts

    def empty(self, shape, dtype) -> np.ndarray: ...

    def exchange(self, sends: Sequence, send_to: Sequence, recv_from: Sequence, recv_like: Sequence | None = None) -> list: ...

    def all_meta(self, items: Sequence) -> list: ...

    def to_numpy(self, array) -> np.ndarray: ...
