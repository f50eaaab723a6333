"""Rank 1 stops (SIGSTOP: a hang, not a crash) before an all-reduce; the others must not wait forever.

    mpiexec -n 3 python tests/mpi/silent_rank.py 2      # watchdog timeout 2 s

Rank 2 (the silent rank's ring successor) waits on it; its watchdog names rank 1 after the timeout and
`run_guarded` ends the whole job with "zerosim: rank 2 failed: SilentRank: rank 1 has not answered ...".
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np

from zerosim import Cluster, all_reduce
from zerosim.backends.mpi import run_guarded

SILENT_RANK = 1


def all_reduce_with_a_silent_rank(timeout: float) -> None:
    from mpi4py import MPI

    cluster = Cluster(MPI.COMM_WORLD.size, backend="mpi")  # the default patience while processes start up
    x = np.ones(1 << 12, dtype=np.float32)
    all_reduce(cluster, [x])  # everyone is alive for this one
    cluster.backend.timeout = timeout  # from here on, the short watchdog the test measures
    if cluster.backend.rank == SILENT_RANK:
        os.kill(os.getpid(), signal.SIGSTOP)  # stops answering; only SIGKILL (MPI_Abort's) ends it now
    all_reduce(cluster, [x])
    print(f"rank {cluster.backend.rank}: the all-reduce finished, which it must not", file=sys.stderr, flush=True)


if __name__ == "__main__":
    run_guarded(all_reduce_with_a_silent_rank, float(sys.argv[1]))
