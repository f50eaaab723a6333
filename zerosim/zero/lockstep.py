"""Run one function per local rank, as if each were its own process, meeting at collectives.

In the simulator all N ranks share this process, but ZeRO-2/3 talk *inside* backward: rank 0 cannot
reduce layer 3's gradients until every rank has computed them. So each rank's forward/backward runs
in its own thread, and the threads take turns with a baton, like coroutines: rank i runs until it
reaches a collective, leaves its array there and hands the baton to rank i+1; the last rank runs the
collective for everyone and hands the baton back to rank 0, which carries on with its result.

Only one rank computes at a time, so the simulator never fights itself for cores (numpy's BLAS may
still use them all inside one rank), and the order of everything is fixed: runs are reproducible. If
a rank raises, every other rank is woken and stopped, and the first error is re-raised.

Threads cost a switch per rank per collective (tens of µs), too slow for 1024 ranks. Two schedules
need none (`choose_schedule` picks one):

    "sequential"  the stage does not talk inside forward/backward (stages 0, 1): ranks simply run
                  one after another, as they do under the baton anyway.
    "meta"        the backend holds no data (meta): a collective's outcome depends only on shapes,
                  dtypes and the layout, never on values, so ranks run one after another and the
                  first rank to reach its k-th collective runs it for every rank, its own input
                  standing in for the others' (they differ at most in length, which `counts` gives).
                  Each rank's ledger sees its own allocations in the same order as under threads.
"""

from __future__ import annotations

import threading


class _Stopped(Exception):
    """Raised inside a rank's thread when another rank failed."""


SCHEDULES = ("threads", "sequential", "meta")


def choose_schedule(backend, talks_inside: bool) -> str:
    """"sequential" when no collective happens inside forward/backward, "meta" for a data-less
    backend, else "threads"."""
    if not talks_inside:
        return "sequential"
    return "threads" if getattr(backend, "has_data", True) else "meta"


class Lockstep:
    def __init__(self, size: int, schedule: str = "threads"):
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown lockstep schedule {schedule!r}; choose one of {SCHEDULES}")
        self.size, self.schedule = size, schedule
        self._inputs = [None] * size
        self._results = None
        self._baton = [threading.Semaphore(0) for _ in range(size)] if schedule == "threads" else []
        self._failed = False
        self._done, self._seen = [], [0] * size  # "meta": results of the k-th collective; calls made per rank

    def _wait(self, i: int) -> None:
        self._baton[i].acquire()
        if self._failed:
            raise _Stopped

    def _pass(self, i: int) -> None:
        self._baton[(i + 1) % self.size].release()

    def collective(self, i: int, value, fn):
        """Rank i's part of a collective: waits until all ranks call, returns fn(all values)[i]."""
        if self.size == 1:
            return fn([value])[0]
        if self.schedule == "sequential":
            raise RuntimeError("a collective inside forward/backward needs the 'threads' (or 'meta') lockstep schedule")
        if self.schedule == "meta":
            k, self._seen[i] = self._seen[i], self._seen[i] + 1
            if k == len(self._done):  # first here: run it for all, this rank's input standing in for each
                self._done.append(fn([value] * self.size))
            results = self._done[k]
            if i == self.size - 1:
                self._done[k] = None  # every rank has its result now
            return results[i]
        self._inputs[i] = value
        if i == self.size - 1:  # everyone is here: run it once for all, then wake rank 0
            inputs, self._inputs = self._inputs, [None] * self.size
            self._results = fn(inputs)
            result = self._results[i]
            self._pass(i)
            self._wait(i)  # resume when rank N-2 reaches the next collective (or finishes)
            return result
        self._pass(i)
        self._wait(i)
        return self._results[i]

    def run(self, fn) -> list:
        """fn(i) for every local rank i, each in its own thread (inline for one rank); their results."""
        if self.size == 1:
            return [fn(0)]
        if self.schedule != "threads":
            self._done, self._seen = [], [0] * self.size
            try:
                return [fn(i) for i in range(self.size)]
            finally:
                self._done = []
        results, errors = [None] * self.size, []
        self._failed = False

        def body(i):
            try:
                self._wait(i)
                results[i] = fn(i)
                if i < self.size - 1:
                    self._pass(i)
            except _Stopped:
                pass  # another rank failed first; its error is the one to report
            except BaseException as e:  # noqa: BLE001 - handed to the caller below
                errors.append((i, e))
                self._failed = True
                for sem in self._baton:
                    sem.release(self.size)

        threads = [threading.Thread(target=body, args=(i,), name=f"rank-{i}", daemon=True) for i in range(self.size)]
        for t in threads:
            t.start()
        self._baton[0].release()
        for t in threads:
            t.join()
        self._baton = [threading.Semaphore(0) for _ in range(self.size)]  # fresh for the next run
        if errors:
            raise errors[0][1]
        return results
