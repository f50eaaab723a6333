"""The MPI backend: one process per rank (mpi4py with the MPICH wheel), its ring over point-to-point send/receive in
NCCL's order, so its numbers equal the simulator's bit for bit. mpi4py is imported only when a backend is made.

    _backend.py   MpiBackend
    _launch.py    how this process was started: alone, or as one rank of an mpiexec job
    _failure.py   when one rank fails, end the whole job (its ring neighbours would wait forever)
"""

from zerosim.backends.mpi._backend import DEFAULT_TIMEOUT, MpiBackend, watchdog_timeout
from zerosim.backends.mpi._failure import abort_job, install_abort_hook, interrupt_job, run_guarded
from zerosim.backends.mpi._launch import (
                                          INSTALL_HINT,
                                          find_mpiexec,
                                          import_mpi,
                                          launched_by_mpiexec,
                                          launched_rank,
                                          world_rank_from_environment,
                                          world_size_from_environment,
)

__all__ = [
    "DEFAULT_TIMEOUT", "INSTALL_HINT", "MpiBackend", "abort_job", "find_mpiexec", "import_mpi", "install_abort_hook",
    "interrupt_job", "launched_by_mpiexec", "launched_rank", "run_guarded", "watchdog_timeout",
    "world_rank_from_environment", "world_size_from_environment",
]
