"""When one MPI rank fails, end the whole job: otherwise its ring neighbours wait forever in a receive.

Opt-in: `run_guarded(fn)` around a rank's program (the CLI does this under mpiexec), or
`install_abort_hook()` (what `MpiBackend(..., abort_on_error=True)` does) for uncaught exceptions.
Either prints ``zerosim: rank R failed: <ExceptionType>: <message>`` and calls `MPI_Abort`.
"""

from __future__ import annotations

import sys
import time
import traceback

from zerosim.backends.launch import import_mpi


class SilentRank(RuntimeError):
    """A peer sent nothing for longer than the MPI backend's watchdog allows (stopped, hung or dead)."""


def failure_message(rank: int, exc: BaseException) -> str:
    return f"zerosim: rank {rank} failed: {type(exc).__name__}: {exc}"


def abort_job(exc: BaseException, comm=None, print_traceback: bool = True) -> None:
    """Print the rank's traceback and ``zerosim: rank R failed: ...`` to stderr, then MPI_Abort(1)."""
    comm = import_mpi().COMM_WORLD if comm is None else comm
    if print_traceback:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    print(failure_message(comm.rank, exc), file=sys.stderr, flush=True)
    # NOTE: mpiexec forwards a rank's stderr through its proxy, which MPI_Abort tears down at once: give the
    # proxy a moment to pass the line on (on a loaded machine it was lost now and then without this)
    time.sleep(0.2)
    comm.Abort(1)  # mpiexec then kills every other process of the job


def run_guarded(fn, *args, comm=None, **kwargs):
    """Call fn(*args, **kwargs); if it raises (or exits non-zero), end the whole MPI job.

    Without this, a rank that dies leaves its ring neighbours waiting forever in a receive.
    """
    try:
        return fn(*args, **kwargs)
    except SystemExit as e:
        if e.code in (None, 0):
            raise
        abort_job(RuntimeError(f"exited with status {e.code}"), comm, print_traceback=False)
    except KeyboardInterrupt:  # Ctrl-C on mpiexec reaches every rank; SIGINT to one rank reaches only it
        interrupt_job("zerosim: interrupted", comm)
    except BaseException as e:  # the other ranks would wait for this one forever
        abort_job(e, comm, print_traceback=not isinstance(e, SilentRank))  # a silent peer: the message says it all


INTERRUPT_GRACE = 2.0  # seconds a rank other than 0 waits for rank 0 to end the job itself after a SIGINT


def interrupt_job(line: str, comm=None) -> None:
    """End the whole job with status 130 (the shell's for SIGINT); rank 0 prints `line`.

    Ctrl-C on mpiexec reaches every rank at once: rank 0 prints the one line and aborts the job (its MPI_Abort ends
    the others). SIGINT sent to one rank reaches only that one while the others wait on it in a collective: it must
    end the job itself — left to the watchdog, the job took 62 s and exited 1. A rank other than 0 cannot tell which
    case it is in, so it gives rank 0 INTERRUPT_GRACE seconds to speak and end the job, then ends it itself (MPICH
    then prints its own line naming the rank)."""
    comm = import_mpi().COMM_WORLD if comm is None else comm
    if comm.rank == 0:
        print(line, file=sys.stderr, flush=True)
        time.sleep(0.2)  # let mpiexec's proxy pass the line on before MPI_Abort tears it down (as abort_job does)
    else:
        time.sleep(INTERRUPT_GRACE)
    comm.Abort(130)


def install_abort_hook(comm=None) -> None:
    """Make an uncaught exception on this rank abort the job (chained after the current excepthook)."""
    if getattr(sys.excepthook, "_zerosim_abort", False):
        return
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        previous(exc_type, exc, tb)  # the usual traceback first
        abort_job(exc, comm, print_traceback=False)

    hook._zerosim_abort = True
    sys.excepthook = hook
