"""The planner's independent pieces of work on several cores: `in_order(work, n, jobs)` yields work(0), ...,
work(n - 1) in that order, each run in one of `jobs` worker processes, so what the caller makes of them is what one
process makes, byte for byte, in less wall time.

Each piece (one stage beside one combination of parallel degrees: `plan`; one published point: `validate`) runs its own
meta-backend steps and reads nothing another piece writes. The workers are forked from the caller, so a piece's
closure (the model's config, the GPU, the settings, the twins built so far) reaches them as the caller holds it, with
nothing pickled on the way there; only each piece's result (rows, predictions: plain dataclasses) travels back. Where
the platform cannot fork (Windows), more than one job is refused with the reason; one job runs the pieces in this
process, as before.

    jobs    what runs the pieces
    1       this process, one after the other (the default)
    k > 1   min(k, n) forked workers, each taking the next piece as it finishes one; results handed on in order
"""

from __future__ import annotations

import multiprocessing
import os

_WORK = None  # the work of the `in_order` running now, which its forked workers inherit


def cores() -> int:
    """The CPUs this process may run on (its affinity where the platform says it, else every CPU): `--jobs auto`."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def check_jobs(jobs, name: str = "jobs") -> int:
    """`jobs` as a count of worker processes (an integer >= 1; "auto": `cores()`, or 1 where the platform cannot
    fork), else a ValueError naming `name` (the caller's spelling: "--jobs")."""
    if jobs == "auto":  # every core this process may use, where it may fork
        return cores() if "fork" in multiprocessing.get_all_start_methods() else 1
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"{name} is the worker processes to run on, an integer of at least 1 or 'auto', got "
                         f"{jobs!r}")
    if jobs > 1 and "fork" not in multiprocessing.get_all_start_methods():
        raise ValueError(f"{name} {jobs}: more than one job forks worker processes, which this platform cannot; "
                         f"run with {name} 1")
    return jobs


def in_order(work, n: int, jobs: int = 1):
    """work(i) for i = 0 .. n - 1, yielded in order: in this process with one job (or one piece), else on min(jobs, n)
    forked workers (the module docstring). An exception a piece raises is raised here when its turn comes, as the
    loop would raise it; the workers are stopped whenever the caller stops reading."""
    global _WORK
    if jobs <= 1 or n < 2:
        for i in range(n):
            yield work(i)
        return
    previous, _WORK = _WORK, work
    try:
        with multiprocessing.get_context("fork").Pool(min(jobs, n)) as pool:
            yield from pool.imap(_run, range(n))
    finally:
        _WORK = previous


def _run(i: int):
    """Piece i of the work the worker was forked with."""
    return _WORK(i)
