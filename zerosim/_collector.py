"""How often CPython's cyclic garbage collector looks while zerosim makes many objects it keeps a while: less often,
and as it was after. An engine's step holds it (its frame, `ZeroEngine.stepping`: a ZeRO step's, and every stage
engine's in a pipeline's step), and so do the planner's memory runs (analysis/planner/_plan.py `plan`) and each
validation point's runs (_validate.py `predict`).

CPython's collector looks at its youngest generation each time 700 more containers were made than freed
(`gc.get_threshold()`'s first number; CPython 3.11 Modules/gcmodule.c, gc_alloc and PyObject_GC_Del), at the middle
one after ten of those and at all of them after ten middle ones; each look visits every container of the
generations it collects. What it finds to free is freed all the same, later and in larger batches; no number
depends on when. Measured:
- A step makes thousands of containers it keeps a while (a small model on 64 ranks: 1,024 `Buffer`s, ~2,000 ledger
  events and 704 `Compute` records a step, the trace's window holding ~10 steps of them, ~38,000 objects) and frees
  about as many as it folds out of its window: the count climbs ~1,600 within a step, ~20 over it. At 700, 100 steps
  of `ZeroEngine(MLP([32, 96, 64, 16]), Cluster(64), 3, ...)` made 187 young, 17 middle and 2 full collections, ~0.9
  ms of a ~13 ms step, and found nothing to free; with the youngest threshold at 5,000 or more while a step runs, 4
  young ones and no older ones. Nothing a step makes is freed only by the collector (its buffers and events go with
  their last reference).
- A memory run of the planner keeps tens of thousands of objects alive while it runs (its log, the ledgers' events):
  at 700 the README's plan spent ~0.15 s in 409 young, 37 middle and 4 full collections; at 20,000, 0.06-0.08 s in
  14 young and one middle one (the first plan of a process), as each run's ledgers also outlived it in a cycle with
  their buffers. Now that the planner lets a run go (_plan.py `let_go`), hardly any of its objects outlive it, and at
  200,000 the README's plan makes ~6 young collections, ~2 ms (20,000: 11 and one middle, 0.02-0.04 s), its peak RSS
  55 MB (65 before `let_go`). `zerosim validate` (29 points, each letting its runs go) at 700 spent 1.3 s of its 6.8
  in 1,711 young, 155 middle and 13 full collections; at 200,000, 0.13-0.17 s in two young ones, both inside NeMo's
  64-micro-batch pipeline, each visiting the ~2·10^5 objects its run holds and freeing none; at 1,000,000, none, its
  peak RSS the same 197 MB; the README's plan now makes none at either, 54 MB.

NOTE: the thresholds are the process's, not a block's: two threads each stepping an engine share them. So the
blocks that raise it are counted (`_Raised`): the first in raises it, the last out puts back what the first found,
unless someone set another threshold meanwhile (theirs is left as they set it).
"""

from __future__ import annotations

import _thread
import gc
from contextlib import contextmanager

# the youngest generation's threshold while a block runs (never lowered)
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
