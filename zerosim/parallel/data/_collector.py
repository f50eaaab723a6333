"""How often CPython's cyclic garbage collector looks while an engine steps: less often, and as it was after (the
step's frame, `ZeroEngine.stepping`, holds it: a ZeRO step's, and every stage engine's in a pipeline's step).

CPython's collector looks at its youngest generation each time 700 more containers were made than freed
(`gc.get_threshold()`'s first number; CPython 3.11 Modules/gcmodule.c, gc_alloc and PyObject_GC_Del), at the middle
one after ten of those and at all of them after ten middle ones; each look visits every container of the
generations it collects. A step makes thousands of containers it keeps a while (a small model on 64 ranks: 1,024
`Buffer`s, ~2,000 ledger events and 704 `Compute` records a step, the trace's window holding ~10 steps of them,
~38,000 objects) and frees about as many as it folds out of its window: the count climbs ~1,600 within a step, ~20
over it. At 700, 100 steps of `ZeroEngine(MLP([32, 96, 64, 16]), Cluster(64), 3, ...)` made 187 young, 17 middle
and 2 full collections, ~0.9 ms of a ~13 ms step, and found nothing to free; with the youngest threshold at 5,000 or
more while a step runs, 4 young ones and no older ones. Nothing a step makes is freed only by the collector (its
buffers and events go with their last reference), and what garbage there is is collected all the same, later; no
number depends on when.

NOTE: the thresholds are the process's, not a step's: two threads each stepping an engine share them. So the blocks
that raise it are counted (`_Raised`): the first in raises it, the last out puts back what the first found, unless
someone set another threshold meanwhile (theirs is left as they set it).
"""

from __future__ import annotations

import _thread
import gc
from contextlib import contextmanager

# the youngest generation's threshold while a step runs (never lowered): the planner's (analysis/planner/
# _collector.py) for its memory runs, which step engines too
YOUNG_COLLECTIONS = 1_000_000


class _Raised:
    """How many blocks hold the youngest threshold raised now, and what the first of them found, under a lock."""

    def __init__(self):
        # _thread's lock is threading.Lock, without importing threading (a first script loads none: _pool.py)
        self.lock, self.blocks, self.found = _thread.allocate_lock(), 0, None

    def enter(self) -> None:
        with self.lock:
            if not self.blocks:
                self.found = gc.get_threshold()
                if self.found[0] < YOUNG_COLLECTIONS:
                    gc.set_threshold(YOUNG_COLLECTIONS, *self.found[1:])
            self.blocks += 1

    def leave(self) -> None:
        with self.lock:
            self.blocks -= 1
            if not self.blocks and gc.get_threshold()[0] == max(self.found[0], YOUNG_COLLECTIONS):
                gc.set_threshold(self.found[0], *gc.get_threshold()[1:])


_RAISED = _Raised()  # NOTE: one for the process, as the collector's thresholds are


@contextmanager
def fewer_collections():
    """The collector's youngest threshold at least YOUNG_COLLECTIONS while the block runs, as it was once the last
    such block (of any thread) has left, an exception too; the other thresholds and the collector on or off as
    they are."""
    _RAISED.enter()
    try:
        yield
    finally:
        _RAISED.leave()
