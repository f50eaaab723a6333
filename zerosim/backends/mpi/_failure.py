"""When one MPI rank fails, end the whole job: otherwise its ring neighbours wait forever in a receive.

Opt-in: `run_guarded(fn)` around a rank's program (the CLI does this under mpiexec), or
`install_abort_hook()` (what `MpiBackend(..., abort_on_error=True)` does) for uncaught exceptions.
Either prints ``zerosim: rank R failed: <ExceptionType>: <message>`` and calls `MPI_Abort`.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

from zerosim.backends.mpi._launch import import_mpi


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
    _abort(comm, 1)  # mpiexec then kills every other process of the job


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
        interrupt_job(getattr(fn, "__name__", "job"), comm)
        return 130
    except BaseException as e:  # the other ranks would wait for this one forever
        abort_job(e, comm, print_traceback=not isinstance(e, SilentRank))  # a silent peer: the message says it all


INTERRUPT_GRACE = 2.0  # seconds an interrupted rank waits to hear that every other rank was interrupted too


def interrupt_job(command: str, comm=None) -> None:
    """After SIGINT: return when every rank was interrupted (Ctrl-C on mpiexec reaches them all), rank 0 having
    printed "zerosim COMMAND: interrupted", so that each can exit with status 130 as usual; otherwise end the whole
    job with MPI_Abort(130).

    SIGINT sent to one rank reaches only that one while the others wait on it in a collective: left to the watchdog,
    the job took 62 s and exited 1. So an interrupted rank joins a non-blocking barrier that only interrupted ranks
    join: it completes when all were interrupted; if it has not within INTERRUPT_GRACE seconds, this rank was
    alone, says so and aborts the job (MPICH then adds its own "Abort(130) on node R" line)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
    comm = import_mpi().COMM_WORLD if comm is None else comm
    everyone = comm.Ibarrier()
    deadline = time.monotonic() + INTERRUPT_GRACE
    while not everyone.Test():
        if time.monotonic() > deadline:  # the others are not coming: they wait on this rank, which must end the job
            said = "interrupted" if comm.rank == 0 else f"rank {comm.rank} got SIGINT: ending the whole job"
            print(f"zerosim {command}: {said}", file=sys.stderr, flush=True)
            time.sleep(0.5)  # let mpiexec's proxy pass the line on before MPI_Abort tears it down (as abort_job does)
            _abort(comm, 130)
        time.sleep(0.01)
    if comm.rank == 0:
        print(f"zerosim {command}: interrupted", file=sys.stderr, flush=True)


def _abort(comm, status: int) -> None:
    """MPI_Abort, and nothing after it: MPICH's can return before mpiexec's kill arrives (rank 0 then went on to
    print its interrupted line a second time), so the process ends here whatever MPI_Abort did."""
    comm.Abort(status)
    os._exit(status)


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
