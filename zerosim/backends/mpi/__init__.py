"""The MPI backend: one process per rank (mpi4py with the MPICH wheel), its ring over point-to-point send/receive in
NCCL's order, so its numbers equal the simulator's bit for bit. mpi4py is imported only when a backend is made.

    _backend.py   MpiBackend
    _launch.py    how this process was started: alone, or as one rank of an mpiexec job
    _failure.py   when one rank fails, end the whole job (its ring neighbours would wait forever)
"""

from zerosim._lazy import lazy_face, names_of

# each name and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py): every command
# asks whether it runs under mpiexec (_launch.py) and, when not, needs neither the backend nor its failure handling
_NAMES = {
    "._backend": ("DEFAULT_TIMEOUT", "MpiBackend", "watchdog_timeout"),
    "._failure": ("abort_job", "install_abort_hook", "interrupt_job", "run_guarded"),
    "._launch": ("INSTALL_HINT", "find_mpiexec", "import_mpi", "launched_by_mpiexec", "launched_rank",
                 "world_rank_from_environment", "world_size_from_environment"),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)
__all__ = sorted(names_of(_NAMES))
