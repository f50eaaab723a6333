"""How often CPython's cyclic garbage collector looks while the planner makes many objects it keeps for a while: its
memory runs (_plan.py `plan`) and each validation point's runs (_validate.py `predict`).
"""

from __future__ import annotations

import contextlib
import gc

# CPython's cyclic collector looks at its youngest generation each time 700 more containers were made than freed
# (gc.get_threshold()'s first number; CPython 3.11 Modules/gcmodule.c, gc_alloc and PyObject_GC_Del), and at the
# older ones after ten of the younger's (the second and third numbers, left as they are); each look visits every
# container of the generations it collects. A memory run keeps tens of thousands of objects alive while it runs (its
# log, the ledgers' events): at 700 the README's plan spent ~0.15 s in 409 young, 37 middle and 4 full collections; at
# 20,000, 0.06-0.08 s in 14 young and one middle one (the first plan of a process), as each run's ledgers also outlived
# it in a cycle with their buffers. Now that the planner lets a run go (_plan.py `let_go`), hardly any of its objects
# outlive it, and at 200,000 the README's plan makes ~6 young collections, ~2 ms (20,000: 11 and one middle,
# 0.02-0.04 s), its peak RSS 55 MB (65 before `let_go`). `zerosim validate` (29 points, each letting its runs go) at
# 700 spent 1.3 s of its 6.8 in 1,711 young, 155 middle and 13 full collections; at 200,000, 0.13-0.17 s in two young
# ones, both inside NeMo's 64-micro-batch pipeline, each visiting the ~2·10^5 objects its run holds and freeing none;
# at 1,000,000, none, its peak RSS the same 197 MB; the README's plan now makes none at either, 54 MB.
# What garbage there is is collected all the same, in larger batches; no answer depends on when.
YOUNG_COLLECTIONS = 1_000_000


@contextlib.contextmanager
def fewer_collections():
    """The cyclic garbage collector's youngest threshold raised to YOUNG_COLLECTIONS (never lowered) while the block
    runs, as it was after, an exception too; the collector on or off as it was."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], YOUNG_COLLECTIONS), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
