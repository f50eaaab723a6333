"""Each process parses its own command line: give rank 1 another --steps and the job must say so.

    mpiexec -n 2 python tests/mpi/disagreeing_ranks.py
"""

from __future__ import annotations

import sys

from mpi4py import MPI

from zerosim.cli.main import main

if __name__ == "__main__":
    steps = "3" if MPI.COMM_WORLD.rank == 0 else "5"
    sys.exit(main(["train", "--backend", "mpi", "--steps", steps]))
