"""The planner's independent pieces of work on several cores: `in_order(work, n, jobs)` yields work(0), ...,
work(n - 1) in that order, each run in one of `jobs` worker processes, so what the caller makes of them is what one
process makes, byte for byte, in less wall time.

Each piece (one checkpointing strategy at one stage beside one combination of parallel degrees: `plan`; one
published point: `validate`; one figure, drawn and saved to bytes for the caller to write: `zerosim figures`) runs its
own steps and reads nothing another piece writes. The workers are forked from the caller, so a piece's closure (the
model's config, the GPU, the settings, the twins built so far) reaches them as the caller holds it, with nothing
pickled on the way there; only each piece's result (rows, predictions: plain dataclasses; a figure's bytes) travels
back, and any file is written by the caller. Where a fork is not to be had (Windows) or not safe (macOS), more than
one job is refused with the reason and `auto` is one; one job runs the pieces in this process, as before. A command
forks from its one thread (the bar it draws first starts none: zerosim/progress.py), as a fork beside another thread
may deadlock in the child; where the caller runs threads of its own (a notebook's kernel), `auto` is one job, and a
count it gives is forked beside them, as asked.

    jobs    what runs the pieces
    1       this process, one after the other (the default)
    k > 1   min(k, n) forked workers, each taking the next piece as it finishes one (the few the caller names first:
            its longest); results handed on in order
"""

from __future__ import annotations

import os

_WORK = None  # the work of the `in_order` running now, which its forked workers inherit


def cores() -> int:
    """The CPUs this process may run on (its affinity where the platform says it, else every CPU): `--jobs auto`."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def check_jobs(jobs, name: str = "jobs") -> int:
    """`jobs` as a count of worker processes (an integer >= 1; "auto": `cores()`, or 1 where no worker may be forked,
    `_forks`, or where this process runs other threads, `_threads`), else a ValueError naming `name` (the caller's
    spelling: "--jobs")."""
    if jobs == "auto":  # every core this process may use, where it may fork and nothing runs beside the fork
        return cores() if _forks() and _threads() == 1 else 1
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"{name} is the worker processes to run on, an integer of at least 1 or 'auto', got "
                         f"{jobs!r}")
    if jobs > 1 and not _forks():
        raise ValueError(f"{name} {jobs}: more than one job forks worker processes, which this platform cannot do "
                         f"safely (Windows has no fork; macOS's system libraries are not safe in a forked child); run "
                         f"with {name} 1")
    return jobs


def in_order(work, n: int, jobs: int = 1, first=()):
    """work(i) for i = 0 .. n - 1, yielded in order: in this process with one job (or one piece), else on min(jobs,
    n) forked workers, each handed the next piece as it finishes one (the module docstring), the pieces `first`
    names (the caller's few longest, as it guesses them) handed out before the others, so that none of them starts
    last and leaves the other workers idle; the order they are yielded in is the same, so a result (and the progress
    a caller reports from it) waits for those. `validate` names its pipelines' points (a third of its CPU),
    `figures` its four longest figures; `plan` none: its pipelines' pieces are most of its pieces, and its progress
    would wait for all. An exception a piece raises is raised here when its turn comes, as the loop would raise it;
    a worker that dies (killed, out of memory) is a ChildProcessError naming its piece, not a wait for ever; the
    workers are stopped when the caller stops reading."""
    global _WORK
    if jobs <= 1 or n < 2:
        for i in range(n):
            yield work(i)
        return
    first = list(dict.fromkeys(first))
    chosen = set(first)
    queue = first + [i for i in range(n) if i not in chosen]  # the order the pieces are handed out in
    if sorted(queue) != list(range(n)):
        raise ValueError(f"first names pieces 0 .. {n - 1}, got {first!r}")
    import multiprocessing  # here: one job (the default) never needs it (~25 ms of a fresh process's imports)
    from multiprocessing import connection

    ctx, previous, _WORK = multiprocessing.get_context("fork"), _WORK, work
    workers, busy, results, handed = [], {}, {}, 0  # busy: a worker's pipe -> (its piece, its process)
    try:
        for _ in range(min(jobs, n)):
            mine, theirs = ctx.Pipe()
            process = ctx.Process(target=_serve, args=(theirs,), daemon=True)
            process.start()
            theirs.close()  # the worker holds its end: one that dies closes it, and `recv` here says so
            workers.append((process, mine))
            mine.send(queue[handed])
            busy[mine], handed = (queue[handed], process), handed + 1
        for i in range(n):
            while i not in results:
                for conn in connection.wait(list(busy)):
                    piece, process = busy.pop(conn)
                    try:
                        results[piece] = conn.recv()
                    except (EOFError, OSError):
                        process.join(timeout=5)
                        raise ChildProcessError(f"a worker process ended (exit status {process.exitcode}) while it ran "
                                                f"piece {piece + 1} of {n}: killed, or out of memory? Run with fewer "
                                                "jobs") from None
                    if handed < n:
                        conn.send(queue[handed])
                        busy[conn], handed = (queue[handed], process), handed + 1
            ok, value = results.pop(i)
            if not ok:
                raise value
            yield value
    finally:
        _WORK = previous
        for process, conn in workers:
            process.kill()  # idle, or running a piece no one will read
            process.join(timeout=5)
            conn.close()


def _serve(conn) -> None:
    """A worker: piece after piece of the work it was forked with, each sent back as (True, result) or (False, the
    exception it raised), until its pipe closes. Ctrl-C is the caller's to answer (it stops the workers)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            i = conn.recv()
        except (EOFError, OSError):
            return
        try:
            out = (True, _WORK(i))
        except Exception as e:  # raised in the caller, in its turn
            out = (False, e)
        try:
            conn.send(out)
        except Exception as e:  # a result or an exception that does not pickle: said, not lost
            conn.send((False, RuntimeError(f"piece {i + 1}'s {'result' if out[0] else 'error'} could not be sent "
                                           f"back from its worker: {e}")))


def _threads() -> int:
    """The Python threads this process runs, this one among them: more than one where a caller runs its own (a
    Jupyter kernel's: its heartbeat, its output's), beside which a forked worker may deadlock (a lock another thread
    held stays held in the child; Python 3.12+ warns of it, and 3.14 no longer forks by default on Linux). `auto`
    takes one job there; a count the caller gives is forked as asked. A `zerosim` command runs one (its bar starts
    none: zerosim/progress.py)."""
    import threading

    return threading.active_count()


def _forks() -> bool:
    """Whether a worker may be forked here: not on Windows (no fork), nor on macOS, where Apple's system libraries are
    not safe in a forked child (Python's own default there is "spawn", since 3.8, for that reason)."""
    import multiprocessing
    import sys

    return sys.platform != "darwin" and "fork" in multiprocessing.get_all_start_methods()
