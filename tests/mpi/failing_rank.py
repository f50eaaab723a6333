"""Rank 1 raises in the middle of a ring all-reduce while the other ranks wait for its messages.

    mpiexec -n 4 python tests/mpi/failing_rank.py hook       # uncaught: the backend's excepthook aborts
    mpiexec -n 4 python tests/mpi/failing_rank.py guarded    # caught by zerosim.backends.mpi._failure.run_guarded

Either way the whole job must end at once, non-zero, with "zerosim: rank 1 failed: RuntimeError: ..."
on stderr. Without the guard, ranks 0, 2 and 3 would wait in a receive forever (try `unguarded`).
"""

from __future__ import annotations

import sys

import numpy as np

from zerosim import Cluster, all_reduce
from zerosim.backends.mpi import run_guarded

FAILING_RANK = 1
FAILING_STEP = 2  # ring step at which the failing rank raises instead of sending


def all_reduce_with_a_failing_rank(abort_on_error: bool) -> None:
    from mpi4py import MPI

    n = MPI.COMM_WORLD.size
    cluster = Cluster(n, backend="mpi", abort_on_error=abort_on_error)
    backend = cluster.backend
    if backend.rank == FAILING_RANK:
        exchange, steps = backend.exchange, []

        def failing_exchange(*args, **kwargs):
            steps.append(len(steps))
            if len(steps) - 1 == FAILING_STEP:
                raise RuntimeError(f"injected failure at ring step {FAILING_STEP}")
            return exchange(*args, **kwargs)

        backend.exchange = failing_exchange
    x = np.arange(1 << 16, dtype=np.float32) + cluster.ranks[0].index  # (L,) fp32, this rank's input
    all_reduce(cluster, [x])
    print(f"rank {backend.rank}: the all-reduce finished, which it must not", file=sys.stderr, flush=True)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "hook"
    if mode == "hook":
        all_reduce_with_a_failing_rank(abort_on_error=True)
    elif mode == "guarded":
        run_guarded(all_reduce_with_a_failing_rank, abort_on_error=False)
    elif mode == "unguarded":  # the hang the guard prevents; for demonstration only
        all_reduce_with_a_failing_rank(abort_on_error=False)
    else:
        sys.exit(f"unknown mode {mode!r}; use hook, guarded or unguarded")
