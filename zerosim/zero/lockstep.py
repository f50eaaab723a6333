"""Run one function per local rank, as if each were its own process, meeting at collectives.

In the simulator all N ranks share this process, but ZeRO-2/3 talk *inside* backward: rank 0 cannot
reduce layer 3's gradients until every rank has computed them. So each rank's forward/backward runs
in its own thread, and a collective is a rendezvous: every rank deposits its array, the last to
arrive runs the collective for all of them, and each takes its result. The numbers do not depend on
thread timing (the collective sees all inputs at once); if any rank raises, the rendezvous is broken
so the others stop instead of waiting forever, and the first error is re-raised.
"""

from __future__ import annotations

import threading


class Lockstep:
    def __init__(self, size: int):
        self.size = size
        self._inputs = [None] * size
        self._results = None
        self._fn = None
        self._barrier = threading.Barrier(size, action=self._run) if size > 1 else None

    def _run(self) -> None:
        inputs, self._inputs = self._inputs, [None] * self.size
        self._results = self._fn(inputs)

    def collective(self, i: int, value, fn):
        """Rank i's part of a collective: blocks until all ranks call, returns fn(all values)[i]."""
        if self._barrier is None:
            return fn([value])[0]
        self._inputs[i] = value
        self._fn = fn  # every rank passes the same operation
        self._barrier.wait()
        return self._results[i]

    def run(self, fn) -> list:
        """fn(i) for every local rank i, each in its own thread (inline for one rank); their results."""
        if self.size == 1:
            return [fn(0)]
        results, errors = [None] * self.size, []

        def body(i):
            try:
                results[i] = fn(i)
            except threading.BrokenBarrierError:
                pass  # another rank failed first; its error is the one to report
            except BaseException as e:  # noqa: BLE001 - handed to the caller below
                errors.append((i, e))
                self._barrier.abort()

        threads = [threading.Thread(target=body, args=(i,), name=f"rank-{i}") for i in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            i, e = errors[0]
            raise e
        return results
