"""The local ranks' work in parallel: one op's per-rank compute on a few threads, its record in rank order.

Within one op of the schedule the ranks' computations are independent (each reads only its own arrays), and
NumPy releases the GIL inside BLAS and most ufuncs, so `Cluster(N, workers=k)` runs them on k threads. Each
rank's arithmetic is unchanged — the same calls in the same order on the same arrays — so every bit is
what one thread gives. What the work records is kept in rank order:

    pool.map(work, ranks, after)
        work(i) for every local rank i, the ranks cut into k contiguous groups, one per thread (the caller's
        thread and k-1 pool threads), in any order; each rank's ledger events (allocs, frees) held back, per
        rank, while they run
        then, in rank order, on the calling thread: rank i's held ledger events into the trace, then after(i, result)

so the event log is byte for byte the one `workers=1` writes (which runs work(i), after(i, result) rank by
rank, as before the pool existed). If any rank's work raises, every other rank's work still finishes (no
thread is left running), the ledger events that did happen reach the trace in rank order (so every later free
has its alloc), no `after` runs, and the first exception in rank order is raised.

NOTE: one BLAS thread per worker. The pool does not change BLAS's own threads (that needs threadpoolctl, not
a dependency): start Python with OPENBLAS_NUM_THREADS=1 (and MKL_NUM_THREADS=1, OMP_NUM_THREADS=1) set, as
tests/conftest.py and the benchmarks do, or k workers will each ask BLAS for all cores. `blas_pinned()` says
whether the environment asks for one thread.
"""

from __future__ import annotations

import contextvars
import os
import threading
from concurrent.futures import ThreadPoolExecutor

BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def blas_pinned() -> bool:
    """True when the environment asks BLAS for one thread (OPENBLAS_NUM_THREADS or OMP_NUM_THREADS is 1)."""
    return os.environ.get("OPENBLAS_NUM_THREADS", os.environ.get("OMP_NUM_THREADS")) == "1"


def default_workers() -> int:
    """The cores this process may run on (os.sched_getaffinity where it exists)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def check_workers(workers) -> int:
    """`workers` as a positive int ("auto": the cores this process may use), or a clear error."""
    if workers == "auto":
        return default_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer or 'auto', got {workers!r}")
    return workers


class RankPool:
    """k threads that run one op's per-rank work; `map` records what it did in rank order (module docstring)."""

    def __init__(self, workers: int = 1):
        self.workers = check_workers(workers)
        self._executor = None  # k-1 threads made on first use, named "zerosim-rank-worker_<i>"; the caller is one
        self.threads_used = set()  # names of the threads that ran a rank's work (tests read it)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RankPool(workers={self.workers})"

    def map(self, work, ranks, after=None) -> list:
        """work(i) for each local rank i (`ranks`: the cluster's Rank objects, in order), then after(i, result) in
        rank order; returns the results in rank order. Ledger events each work made reach the trace just before
        its `after`, so the log is the one a loop over the ranks writes."""
        ranks = list(ranks)
        if self.workers == 1 or len(ranks) < 2:
            results = []
            for i in range(len(ranks)):
                results.append(self._run(work, i))
                if after is not None:
                    after(i, results[-1])
            return results
        held = [[] for _ in ranks]
        sinks = [r.ledger.sink for r in ranks]
        for r, box in zip(ranks, held):
            if r.ledger.sink is not None:
                r.ledger.sink = box.append  # per rank: only its own worker touches this ledger during the op
        # k contiguous groups of ranks: the caller's thread runs the first, k-1 pool threads the others (one task
        # per thread, not per rank: a handoff costs tens of microseconds, a small layer's op not much more)
        k = min(self.workers, len(ranks))
        groups = [range(len(ranks) * j // k, len(ranks) * (j + 1) // k) for j in range(k)]
        try:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.workers - 1, thread_name_prefix="zerosim-rank-worker")
            # errstate and other context variables follow the caller into the threads (a copy per task)
            futures = [self._executor.submit(contextvars.copy_context().run, self._group, work, g) for g in groups[1:]]
            outcomes = self._group(work, groups[0])
            for f in futures:  # waits for every rank: none is left running
                outcomes += f.result()
        finally:
            for r, sink in zip(ranks, sinks):
                r.ledger.sink = sink
        failed = next((e for e, _ in outcomes if e is not None), None)
        results = []
        for i, box in enumerate(held):
            for event in box:
                sinks[i](event)
            if failed is not None:
                continue
            results.append(outcomes[i][1])
            if after is not None:
                after(i, results[-1])
        if failed is not None:
            raise failed
        return results

    def _group(self, work, indices) -> list:
        """[(exception or None, result)] of work(i) for each i, in order; a failure does not stop the others."""
        out = []
        for i in indices:
            try:
                out.append((None, self._run(work, i)))
            except Exception as e:  # raised by the caller, in rank order, once every rank has finished
                out.append((e, None))
        return out

    def _run(self, work, i):
        name = threading.current_thread().name
        if name not in self.threads_used:
            with self._lock:
                self.threads_used.add(name)
        return work(i)

    def close(self) -> None:
        """Stop the threads (they also end with the process)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
