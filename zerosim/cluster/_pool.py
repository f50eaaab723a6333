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

    pool.map_steps(work, ranks, steps, after)
        the same for a run of `steps` steps with nothing between them that reads another rank (a micro-step's
        whole forward and backward at stages 0/1, parallel/data/_compute.py): each rank runs work(i, 0), work(i, 1), ...
        on its thread, one handoff per thread for the whole run; then step by step, rank by rank, the held
        ledger events and after(i, j, result): the log of `for j: for i: work(i, j); after(i, j, result)`

With one worker the pool may also hand an op to one computation for every rank (`stacks`, the default: models/
_stacked.py, where the layer and its kernels treat rows apart; the same bits and log as the loop over ranks);
`Cluster(N, stack_ranks=False)` keeps the loop, rank by rank.

NOTE: one BLAS thread per worker. The pool does not change BLAS's own threads (that needs threadpoolctl, not
a dependency): start Python with OPENBLAS_NUM_THREADS=1 (and MKL_NUM_THREADS=1, OMP_NUM_THREADS=1) set, as
tests/conftest.py and the benchmarks do, or k workers will each ask BLAS for all cores. `blas_pinned()` says
whether the environment asks for one thread.
"""

from __future__ import annotations

import _thread
import contextvars
import os

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

    def __init__(self, workers: int = 1, stack_ranks: bool = True):
        self.workers = check_workers(workers)
        if not isinstance(stack_ranks, bool):
            raise ValueError(f"stack_ranks must be True or False, got {stack_ranks!r}")
        self.stacks = stack_ranks and self.workers == 1  # one op may run as one computation for every rank
        self._executor = None  # k-1 threads made on first use, named "zerosim-rank-worker_<i>"; the caller is one
        self.threads_used = set()  # names of the threads that ran a rank's work (tests read it)
        self._lock = _thread.allocate_lock()  # threading.Lock: threading waits for a second worker

    def __repr__(self) -> str:
        return f"RankPool(workers={self.workers})"

    def map(self, work, ranks, after=None) -> list:
        """work(i) for each local rank i (`ranks`: the cluster's Rank objects, in order), then after(i, result) in
        rank order; returns the results in rank order. Ledger events each work made reach the trace just before
        its `after`, so the log is the one a loop over the ranks writes."""
        done = self.map_steps(lambda i, j: work(i), ranks, 1, None if after is None else lambda i, j, r: after(i, r))
        return [r[0] for r in done]

    def map_steps(self, work, ranks, steps: int, after=None, before=None) -> list:
        """work(i, j) for each local rank i and step j < `steps` (steps of one rank run in order, each reading
        only rank i's arrays and what its earlier steps made), then after(i, j, result) step by step, rank by
        rank: what the loop `for j: for i: work(i, j); after(i, j, ...)` does and records, in one handoff per
        thread instead of one per step. Returns results[i][j].

        On the workers each rank runs all its steps (or up to its own failure); then step j's held ledger events
        and `after`s go in rank order, for every j before the first failing step, and only the ledger events from
        there on (every later free keeps its alloc); the failure of the earliest step (the lowest rank among
        equals) is raised, as the loop would raise it.

        before(j), where given, runs on the calling thread once every rank has finished step j - 1 and none has
        begun step j: before each step on one worker; before step 0 only on several (each rank runs ahead through
        its steps). A hint that reads every rank's inputs at once (`Arithmetic.prepare`), so it must change no
        result."""
        ranks = list(ranks)
        if self.workers == 1 or len(ranks) < 2:  # the loop itself: op-major, each after at once
            return self._loop(work, ranks, steps, after, before)
        held = [[[] for _ in range(steps)] for _ in ranks]  # held[i][j]: rank i's ledger events of step j
        sinks = [r.ledger.sink for r in ranks]
        # k contiguous groups of ranks: the caller's thread runs the first, k-1 pool threads the others (one task
        # per thread, not per rank or step: a handoff costs tens of microseconds, a small layer's op not much more)
        k = min(self.workers, len(ranks))
        groups = [range(len(ranks) * q // k, len(ranks) * (q + 1) // k) for q in range(k)]
        if before is not None and steps:
            before(0)
        try:
            if self._executor is None:
                from concurrent.futures import ThreadPoolExecutor  # here: one worker (the default) never needs it

                self._executor = ThreadPoolExecutor(self.workers - 1, thread_name_prefix="zerosim-rank-worker")
            # errstate and other context variables follow the caller into the threads (a copy per task)
            futures = [self._executor.submit(contextvars.copy_context().run, self._group, work, g, steps, ranks,
                                             held) for g in groups[1:]]
            outcomes = self._group(work, groups[0], steps, ranks, held)
            for f in futures:  # waits for every rank: none is left running
                outcomes += f.result()
        finally:
            for r, sink in zip(ranks, sinks):
                r.ledger.sink = sink
        self._hand_over(held, sinks, outcomes, steps, after)
        return [results for _, _, results in outcomes]

    def _loop(self, work, ranks: list, steps: int, after, before) -> list:
        """map_steps on the calling thread: the loop itself, step by step, rank by rank, each `after` at once."""
        results = [[None] * steps for _ in ranks]
        if ranks and steps:
            self._run(lambda i, j: None, 0, 0)  # notes the caller's thread among those used, once
        for j in range(steps):
            if before is not None:
                before(j)
            for i in range(len(ranks)):
                results[i][j] = out = work(i, j)
                if after is not None:
                    after(i, j, out)
        return results

    def _hand_over(self, held: list, sinks: list, outcomes: list, steps: int, after) -> None:
        """The workers' held ledger events and the `after`s, step by step in rank order, up to the first failing
        step (then only the ledger events); that step's failure raised."""
        failures = [(j, i, e) for i, (j, e, _) in enumerate(outcomes) if e is not None]
        stop = min(failures, key=lambda f: f[:2])[0] if failures else steps
        for j in range(steps):
            for i, boxes in enumerate(held):
                for event in boxes[j]:
                    sinks[i](event)
                if j < stop and after is not None:
                    after(i, j, outcomes[i][2][j])
        if failures:
            raise min(failures, key=lambda f: f[:2])[2]

    def _group(self, work, indices, steps, ranks, held) -> list:
        """[(failing step, exception or None, [result of each step])] for each rank i in `indices`: its steps in
        order, its ledger's events into held[i][j]; a failure ends that rank's steps, not the others'."""
        out = []
        for i in indices:
            ledger, results, failure = ranks[i].ledger, [], (steps, None)
            for j in range(steps):
                if ledger.sink is not None:  # per rank: only its own worker touches this ledger during the map
                    ledger.sink = held[i][j].append
                try:
                    results.append(self._run(work, i, j))
                except Exception as e:  # raised by the caller, in step and rank order, once every rank has finished
                    failure = (j, e)
                    break
            out.append((*failure, results))
        return out

    def _run(self, work, i, j):
        import threading  # loaded with the workers' threads (concurrent.futures) by now

        name = threading.current_thread().name
        if name not in self.threads_used:
            with self._lock:
                self.threads_used.add(name)
        return work(i, j)

    def close(self) -> None:
        """Stop the threads (they also end with the process)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
