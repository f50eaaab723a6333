"""How this process was started: alone, or as one rank of a job that mpiexec launched.

Shared by the MPI and CuPy backends and the CLI; nothing here imports mpi4py unless it must.
"""

from __future__ import annotations

import os
import shutil
import sys

INSTALL_HINT = "the mpi backend needs mpi4py and an MPI library: pip install -e '.[mpi]'"
MPI_LAUNCH_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")  # set by Open MPI's and MPICH/Hydra's mpiexec
MPI_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMI_RANK")


def import_mpi():
    """mpi4py's MPI module (initialising MPI), or an ImportError that says how to install it."""
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError, OSError) as e:  # no mpi4py, or no libmpi for it to load
        raise ImportError(f"{INSTALL_HINT} ({type(e).__name__}: {e})") from e
    return MPI


def find_mpiexec() -> str | None:
    """The mpiexec that belongs to this Python (the mpich wheel puts it next to the interpreter), else PATH's."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else shutil.which("mpiexec")


def launched_by_mpiexec() -> bool:
    """True when an mpiexec started this process as one of several (read from its environment, no MPI import)."""
    return any(os.environ.get(k, "1") not in ("", "1") for k in MPI_LAUNCH_ENV)


def launched_rank() -> int | None:
    """This process's rank as mpiexec's environment says (no MPI import), or None when not launched by it."""
    if not launched_by_mpiexec():
        return None
    for var in MPI_RANK_ENV:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return None


def world_size_from_environment() -> int:
    """The number of processes mpiexec started (1 when run without mpiexec)."""
    return import_mpi().COMM_WORLD.Get_size()


def world_rank_from_environment() -> int:
    """This process's rank in the job mpiexec started (0 when run without mpiexec)."""
    return import_mpi().COMM_WORLD.Get_rank()
