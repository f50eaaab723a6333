"""Assignment 1 (a week, ~9 h): collectives and rounding. Predict what a ring sends, how long it takes and what 16
bits do to 2048 + 1 + 1 + 1; write the ring reduce-scatter, all-gather and all-reduce with per-hop rounding in NCCL's
order, and a tree all-reduce; explain.

Graded against zerosim's own collectives (collectives/_calls.py, chunk_maps/_tree.py) bit for bit, the predictions
against the α-β model (analysis/timeline/_cost.py) within stated tolerances. A wrong answer that equals what a known
misconception produces (rounding once, starting the ring at the wrong rank, no padding, a bidirectional bandwidth,
...) is named as that misconception.
"""

from __future__ import annotations

import numpy as np

from zerosim.teaching.assignments._assignment import Assignment
from zerosim.teaching.assignments._parts import Misconception, Part, diagnose, handout_points, tests_of, wrong
from zerosim.teaching.exercises import Counterexample, Exercise, first_difference

STARTER = '''\
"""Assignment 1: collectives and rounding. See `zerosim assignment show 1`."""
import numpy as np


def predict_2048():
    """By hand: {"fp16": [4 numbers], "bf16": [4 numbers]}, what ranks 0-3 own after a ring reduce-scatter when rank
    0 holds 2048 in each of 4 elements and ranks 1-3 hold 1."""
    raise NotImplementedError


def predict_ring_bytes(N, elements, itemsize):
    """Bytes one rank sends in a ring all-reduce of a buffer of `elements` values of `itemsize` bytes on N ranks
    (the buffer padded to a multiple of N and cut into N equal chunks)."""
    raise NotImplementedError


def predict_allreduce_ms(gigabytes, N, link_GBps, alpha_us):
    """Milliseconds of a ring all-reduce of `gigabytes` GB on N ranks over a link sold as `link_GBps` GB/s
    *bidirectional* (a datasheet's figure), with `alpha_us` µs of latency per ring step."""
    raise NotImplementedError


def ring_reduce_scatter(xs, wire):
    """xs: N 1-D arrays of L values (one per rank). wire: the numpy dtype on the wire (np.float16,
    ml_dtypes.bfloat16, np.float32). Returns N arrays: rank r's chunk r of the sum, in `wire`, real elements only."""
    raise NotImplementedError


def ring_all_gather(shards):
    """shards: N 1-D arrays of s values (rank r's shard r). Returns N arrays of N*s values: the shards in order."""
    raise NotImplementedError


def ring_all_reduce(xs, wire):
    """N arrays of L values in, N arrays of L values out: every rank's copy of the sum, in `wire`, as NCCL's ring
    computes it (your reduce-scatter, then your all-gather)."""
    raise NotImplementedError


def tree_all_reduce(xs, wire):
    """The sum up a binary tree rooted at rank 0 (rank r's children: 2r + 1, then 2r + 2): each rank adds its left
    child's partial sum to its own, then its right child's, every add rounded to `wire`; every rank gets the root's
    sum. N arrays of L values in and out."""
    raise NotImplementedError
'''


def _dtype(name: str):
    from zerosim.precision import get_format

    return get_format(name).dtype


def _cast(x, wire: str):
    from zerosim.precision import cast

    return cast(np.asarray(x, dtype=np.float64), wire)


def _bits_equal(a, b) -> bool:
    if not isinstance(a, (list, tuple)) or len(a) != len(b):
        return False
    return all(first_difference(np.asarray(x), np.asarray(y), "") is None for x, y in zip(a, b))


def _per_rank(flat, n: int, size: int, length: int) -> list:
    """Rank r's chunk r of `flat` (the real elements only): chunks of `size`."""
    return [flat[r * size:r * size + max(0, min(size, length - r * size))] for r in range(n)]


# -- Part B: the reduce-scatter -------------------------------------------------------------------------------------
def _rs_cases():
    rng = np.random.default_rng(24)
    yield {"what": "N = 2, L = 4, fp32, small integers (every sum exact)", "wire": "fp32",
           "xs": [np.arange(4, dtype=np.float32) * (r + 1) for r in range(2)]}
    yield {"what": "N = 4, L = 4, fp16: rank 0 holds 2048, ranks 1-3 hold 1", "wire": "fp16",
           "xs": [np.full(4, 2048, np.float16)] + [np.ones(4, np.float16) for _ in range(3)]}
    yield {"what": "N = 3, L = 9, fp32 in, fp16 on the wire (cast the inputs first)", "wire": "fp16",
           "xs": [(rng.standard_normal(9) * 1000).astype(np.float32) for _ in range(3)]}
    # the hidden ones from here: padding, more ranks, bf16
    yield {"what": "N = 4, L = 6 (padded to 8: rank 3 owns no real element)", "wire": "fp32",
           "xs": [np.arange(6, dtype=np.float32) + r for r in range(4)]}
    yield {"what": "N = 4, L = 2 (fewer elements than ranks)", "wire": "fp16",
           "xs": [np.array([1.5, -2], np.float16) * (r + 1) for r in range(4)]}
    yield {"what": "N = 8, L = 37, fp16, random values: every hop's rounding matters", "wire": "fp16",
           "xs": [(rng.standard_normal(37) * 300).astype(np.float16) for _ in range(8)]}
    yield {"what": "N = 5, L = 23, bf16, random values", "wire": "bf16",
           "xs": [(rng.standard_normal(23) * 50).astype(np.float32) for _ in range(5)]}
    yield {"what": "N = 1, L = 3 (one rank: nothing moves)", "wire": "fp16", "xs": [np.array([1, 2, 3], np.float16)]}


def _ring_sum(xs, wire, start_shift=0):
    """The sum in the ring's order (collectives' naive twin), each chunk starting at rank c + 1 + start_shift."""
    from zerosim.collectives import ShardLayout, naive_reduce

    n = len(xs)
    layout = ShardLayout(len(xs[0]), n)
    staged = [_cast(x, wire) for x in xs]
    chunks = [((c + start_shift) % n, *layout.real_bounds(c)) for c in range(n)]
    return naive_reduce(staged, wire=wire, chunks=chunks), layout


def _rs_round_once(case):
    from zerosim.collectives import naive_reduce

    xs, wire = case["xs"], case["wire"]
    total = _cast(naive_reduce([_cast(x, wire) for x in xs], order="float64"), wire)
    n = len(xs)
    s = -(-len(xs[0]) // n)
    return _per_rank(total, n, s, len(xs[0]))


def _rs_wrong_start(case):
    flat, layout = _ring_sum(case["xs"], case["wire"], start_shift=-1)
    return _per_rank(flat, len(case["xs"]), layout.shard_size, len(case["xs"][0]))


def _rs_no_padding(case):
    xs, n = case["xs"], len(case["xs"])
    floor = len(xs[0]) // n
    if floor * n == len(xs[0]):
        return None
    flat, _ = _ring_sum([x[:floor * n] for x in xs], case["wire"])
    return [flat[r * floor:(r + 1) * floor] for r in range(n)]


def _rs_wire_late(case):
    from zerosim.collectives import ShardLayout, naive_reduce

    xs = case["xs"]
    if xs[0].dtype == _dtype(case["wire"]):
        return None
    layout = ShardLayout(len(xs[0]), len(xs))
    flat = _cast(naive_reduce([np.asarray(x) for x in xs]), case["wire"])  # the adds in the inputs' format
    return _per_rank(flat, len(xs), layout.shard_size, len(xs[0]))


RS_MISCONCEPTIONS = (
    Misconception("round_once", "you summed exactly (or in float64) and rounded once at the end; NCCL's kernels "
                  "round every partial sum to the wire format at every hop, so 16-bit sums lose what an exact sum "
                  "keeps",
                  _rs_round_once),
    Misconception("wrong_start", "chunk c's partial sum started at rank c; in NCCL's ring it starts at rank c + 1 and "
                  "ends at rank c, which owns it (the same adds in another order round differently)", _rs_wrong_start),
    Misconception("no_padding", "you cut L into N chunks of floor(L / N) and lost the tail; pad to a multiple of N "
                  "with zeros and cut chunks of ceil(L / N)", _rs_no_padding),
    Misconception("wire_late", "you added in the inputs' format and cast at the end; the inputs go onto the wire "
                  "first, and every add rounds to the wire format", _rs_wire_late),
)


def _check_rs(fn, case):
    from zerosim.cluster import Cluster
    from zerosim.collectives import reduce_scatter

    n = len(case["xs"])
    want = reduce_scatter(Cluster(n), [x.copy() for x in case["xs"]], wire=case["wire"])
    got = fn([x.copy() for x in case["xs"]], _dtype(case["wire"]))
    if not isinstance(got, (list, tuple)) or len(got) != n:
        raise Counterexample(f"returned {type(got).__name__} of length {len(got) if hasattr(got, '__len__') else '?'}"
                             f"; want a list of {n} arrays, one per rank")
    for r, (g, w) in enumerate(zip(got, want)):
        problem = first_difference(np.asarray(g), w, f"rank {r}'s chunk")
        if problem:
            raise wrong(problem, diagnose(list(got), case, RS_MISCONCEPTIONS, _bits_equal))


# -- Part C: the all-gather -----------------------------------------------------------------------------------------
def _ag_cases():
    yield {"what": "N = 2, shards of 2 (fp16)", "shards": [np.array([1, 2], np.float16), np.array([3, 4], np.float16)]}
    yield {"what": "N = 4, shards of 3 (fp32)", "shards": [np.arange(3, dtype=np.float32) + 10 * r for r in range(4)]}
    yield {"what": "N = 3, shards of 1 (bf16)",
           "shards": [np.array([r + 0.5]).astype(_dtype("bf16")) for r in range(3)]}
    yield {"what": "N = 8, shards of 5 (fp16)", "shards": [np.arange(5, dtype=np.float16) * r for r in range(8)]}


def _own_first(shards) -> list:
    return [np.concatenate([shards[r]] + [x for c, x in enumerate(shards) if c != r]) for r in range(len(shards))]


AG_MISCONCEPTIONS = (
    Misconception("gather_own_first", "each rank put its own shard first; an all-gather leaves every rank with the "
                  "shards in rank order, the same buffer everywhere (rank r's shard at offset r·s)",
                  lambda case: _own_first(case["shards"])),
    Misconception("own_only", "each rank kept only its own shard: nothing was gathered",
                  lambda case: [s.copy() for s in case["shards"]]),
)


def _check_ag(fn, case):
    from zerosim.cluster import Cluster
    from zerosim.collectives import all_gather

    n = len(case["shards"])
    want = all_gather(Cluster(n), [s.copy() for s in case["shards"]])
    got = fn([s.copy() for s in case["shards"]])
    if not isinstance(got, (list, tuple)) or len(got) != n:
        raise Counterexample(f"want a list of {n} arrays, one per rank; got {type(got).__name__}")
    for r, (g, w) in enumerate(zip(got, want)):
        problem = first_difference(np.asarray(g), w, f"rank {r}'s gathered buffer")
        if problem:
            raise wrong(problem, diagnose(list(got), case, AG_MISCONCEPTIONS, _bits_equal))


# -- Part D: the all-reduce -----------------------------------------------------------------------------------------
def _ar_cases():
    for c in list(_rs_cases()):
        if len(c["xs"]) > 1:
            yield c


def _ar_from(chunks_of, case, order=None):
    """An all-reduce built from reduce-scatter chunks `chunks_of(case)` (each padded back to s), gathered in rank
    order, or in `order(r)` for rank r."""
    n, length = len(case["xs"]), len(case["xs"][0])
    s = -(-length // n)
    chunks = chunks_of(case)
    full = [np.concatenate([c, np.zeros(s - len(c), c.dtype)]) for c in chunks]
    return [np.concatenate([full[c] for c in (order(r) if order else range(n))])[:length] for r in range(n)]


def _rs_right(case):
    from zerosim.cluster import Cluster
    from zerosim.collectives import reduce_scatter

    return reduce_scatter(Cluster(len(case["xs"])), [x.copy() for x in case["xs"]], wire=case["wire"])


AR_MISCONCEPTIONS = (
    Misconception("round_once", "you summed exactly and rounded once; the ring rounds at every hop of its "
                  "reduce-scatter, so the all-reduce carries those roundings to every rank",
                  lambda case: [np.concatenate(_rs_round_once(case))[:len(case["xs"][0])]] * len(case["xs"])),
    Misconception("wrong_start", "your reduce-scatter started chunk c's partial sum at rank c, not c + 1: the "
                  "all-reduce inherits its other rounding", lambda case: _ar_from(_rs_wrong_start, case)),
    Misconception("gather_own_first", "your all-gather put each rank's own chunk first: every rank must end with "
                  "the same buffer, in rank order", lambda case: _ar_from(_rs_right, case, lambda r: [r] + [
                      c for c in range(len(case["xs"])) if c != r])),
    Misconception("reduce_scatter_only", "every rank returned only its own chunk; an all-reduce gives every rank "
                  "the whole sum (the reduce-scatter, then the all-gather)", lambda case: None),
)


def _check_ar(fn, case):
    from zerosim.cluster import Cluster
    from zerosim.collectives import all_reduce

    n = len(case["xs"])
    want = all_reduce(Cluster(n), [x.copy() for x in case["xs"]], wire=case["wire"])
    got = fn([x.copy() for x in case["xs"]], _dtype(case["wire"]))
    if not isinstance(got, (list, tuple)) or len(got) != n:
        raise Counterexample(f"want a list of {n} arrays, one per rank; got {type(got).__name__}")
    for r, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        if g.shape != w.shape:
            short = "its own chunk only" if g.shape[0] < w.shape[0] else "more than the buffer"
            raise wrong(f"rank {r}'s result has shape {g.shape}, the ring's {w.shape} ({short})",
                        AR_MISCONCEPTIONS[-1] if g.shape[0] < w.shape[0] else None)
        problem = first_difference(g, w, f"rank {r}'s sum")
        if problem:
            raise wrong(problem, diagnose(list(got), case, AR_MISCONCEPTIONS[:-1], _bits_equal))


# -- Part E: the tree -----------------------------------------------------------------------------------------------
def _tree_cases():
    rng = np.random.default_rng(41)
    yield {"what": "N = 3, fp32, small integers (exact)", "wire": "fp32",
           "xs": [np.arange(3, dtype=np.float32) * (r + 1) for r in range(3)]}
    yield {"what": "N = 5, fp16: 2048 on rank 0, 1 on the others", "wire": "fp16",
           "xs": [np.full(2, 2048, np.float16)] + [np.ones(2, np.float16) for _ in range(4)]}
    yield {"what": "N = 6, fp16, random values (hidden)", "wire": "fp16",
           "xs": [(rng.standard_normal(7) * 500).astype(np.float16) for _ in range(6)]}
    yield {"what": "N = 9, bf16, random values (hidden)", "wire": "bf16",
           "xs": [(rng.standard_normal(5) * 40).astype(np.float32) for _ in range(9)]}


def _tree_order(xs, wire, children):
    n = len(xs)
    staged = [_cast(x, wire) for x in xs]

    def partial(r):
        acc = staged[r]
        for child in children(r):
            if child < n:
                acc = _cast(acc.astype(np.float64) + partial(child).astype(np.float64), wire)
        return acc

    total = partial(0)
    return [total.copy() for _ in range(n)]


TREE_MISCONCEPTIONS = (
    Misconception("right_child_first", "you added the right child (2r + 2) before the left (2r + 1); a tree's sum is "
                  "an order of adds like the ring's, and 16-bit adds in another order round differently",
                  lambda case: _tree_order(case["xs"], case["wire"], lambda r: (2 * r + 2, 2 * r + 1))),
    Misconception("round_once", "you summed exactly and rounded once; every add on the tree rounds to the wire",
                  lambda case: [np.concatenate(_rs_round_once(case))[:len(case["xs"][0])]] * len(case["xs"])),
    Misconception("ring_order", "you summed in the ring's order; the tree adds children into parents",
                  lambda case: [np.asarray(a) for a in _ring_all(case)]),
)


def _ring_all(case):
    from zerosim.cluster import Cluster
    from zerosim.collectives import all_reduce

    return all_reduce(Cluster(len(case["xs"])), [x.copy() for x in case["xs"]], wire=case["wire"])


def _check_tree(fn, case):
    from zerosim.collectives import tree_all_reduce

    n = len(case["xs"])
    want = tree_all_reduce([x.copy() for x in case["xs"]], case["wire"])
    got = fn([x.copy() for x in case["xs"]], _dtype(case["wire"]))
    if not isinstance(got, (list, tuple)) or len(got) != n:
        raise Counterexample(f"want a list of {n} arrays, one per rank; got {type(got).__name__}")
    for r, (g, w) in enumerate(zip(got, want)):
        problem = first_difference(np.asarray(g), w, f"rank {r}'s sum")
        if problem:
            raise wrong(problem, diagnose(list(got), case, TREE_MISCONCEPTIONS, _bits_equal))


# -- Part A: the predictions (checked at submission, with the reason) -------------------------------------------------
def _check_2048(fn, case):
    from zerosim.cluster import Cluster
    from zerosim.collectives import reduce_scatter

    dt = _dtype(case["fmt"])
    xs = [np.full(4, 2048, dt)] + [np.ones(4, dt) for _ in range(3)]
    want = [float(s[0]) for s in reduce_scatter(Cluster(4), xs)]
    got = fn()
    said = got.get(case["fmt"]) if isinstance(got, dict) else None
    if said is None or [float(v) for v in said] != want:
        exact = [2051.0] * 4
        named = None
        if said is not None and [float(v) for v in said] == exact:
            from zerosim.precision import ulp

            spacing = float(ulp(2048.0, case["fmt"]))  # the format asked about: fp16's 2 above 2048, bf16's 16
            named = Misconception("exact_sum", f"2051 is the exact sum, which {case['fmt']} cannot hold (its spacing "
                                  f"above 2048 is {spacing:g}); a ring rounds each chunk's partial sums in its own "
                                  "order", None)
        raise wrong(f"your {case['fmt']} prediction {said!r} is not what the ring gives; run your ring_reduce_scatter "
                    "on it and find the hop where each chunk rounds", named)


def _bytes_cases():
    yield {"what": "N = 4, 1,000 fp16 values", "N": 4, "elements": 1000, "itemsize": 2}
    yield {"what": "N = 8, 7e9 fp16 gradients (seed 001's 7B)", "N": 8, "elements": 7_000_000_000, "itemsize": 2}
    yield {"what": "N = 3, 10 fp32 values (padded to 12)", "N": 3, "elements": 10, "itemsize": 4}


def _check_bytes(fn, case):
    from zerosim.teaching._predict import judge

    n, e, b = case["N"], case["elements"], case["itemsize"]
    answer = 2 * (n - 1) * -(-e // n) * b
    verdict = judge(fn(n, e, b), answer, unit="B", why="a ring all-reduce is two phases (reduce-scatter, "
                    "all-gather) of N - 1 steps; in each step a rank sends one chunk of ceil(E / N) values, so "
                    "2(N - 1)·ceil(E / N)·itemsize bytes: about 2× the buffer, whatever N",
                    wrong=((2 * e * b, "2·E·itemsize: the whole buffer twice; a rank sends (N - 1)/N of it per phase, "
                            "and the padding counts."),
                           ((n - 1) * -(-e // n) * b, "one phase only: an all-reduce is a reduce-scatter and an "
                            "all-gather."),
                           (2 * (n - 1) * e * b, "every rank sending its whole buffer to every other: the naive "
                            "all-reduce a ring avoids.")))
    if not verdict.right:
        raise Counterexample(verdict.message.replace("\n", " "))


def _ms_cases():
    yield {"what": "14 GB on 8 GPUs over NVLink 4 (900 GB/s bidirectional, 3 µs)", "gb": 14.0, "N": 8,
           "bw": 900.0, "alpha": 3.0}
    yield {"what": "0.5 GB on 64 GPUs over InfiniBand NDR (100 GB/s bidirectional, 5 µs)", "gb": 0.5, "N": 64,
           "bw": 100.0, "alpha": 5.0}


def _check_ms(fn, case):
    from zerosim.analysis.costs import Link
    from zerosim.analysis.timeline import ring_collective_time
    from zerosim.teaching._predict import judge

    one_way = Link("as given", case["bw"] * 1e9 / 2, case["alpha"] * 1e-6, "")
    both = Link("bidirectional", case["bw"] * 1e9, case["alpha"] * 1e-6, "")
    answer = 1e3 * ring_collective_time("all_reduce", case["gb"] * 1e9, case["N"], one_way)
    verdict = judge(fn(case["gb"], case["N"], case["bw"], case["alpha"]), answer, tolerance=0.01, unit="ms",
                    why="a ring rank sends to one neighbour while it receives from the other, so each direction "
                    "carries half the bidirectional figure: 2(N - 1)/N · bytes / (bw / 2) + 2(N - 1)·α (the tolerance, "
                    "1 %, covers rounding your arithmetic)",
                    wrong=((1e3 * ring_collective_time("all_reduce", case["gb"] * 1e9, case["N"], both),
                            "the time at the bidirectional bandwidth: seed 001's 31 ms mistake."),
                           (1e3 * 2 * case["gb"] * 1e9 / (case["bw"] * 1e9 / 2), "2 · bytes / (bw / 2): without the "
                            "ring's (N - 1)/N and its latency.")))
    if not verdict.right:
        raise Counterexample(verdict.message.replace("\n", " "))


def _exercise(name, title, function, cases, check, grades):
    return Exercise(name, title, function, "", STARTER, "", cases=cases, check=check, grades=grades)


# What answers each part's cases in zerosim, refused to a submission: the collectives (and the oracle's twins of
# them) for the code, the α-β model for the time, the ring's own run for the prediction of what it sums
COLLECTIVES = ("zerosim.collectives", "zerosim.reference")
COSTS = ("zerosim.analysis", "zerosim.collectives")


PREDICT_2048 = _exercise("predict_2048", "2048 + 1 + 1 + 1 by hand", "predict_2048",
                         lambda: iter([{"what": "fp16", "fmt": "fp16"}, {"what": "bf16", "fmt": "bf16"}]),
                         _check_2048, COLLECTIVES)
PREDICT_BYTES = _exercise("predict_ring_bytes", "bytes one rank sends in a ring all-reduce", "predict_ring_bytes",
                          _bytes_cases, _check_bytes, COSTS)
PREDICT_MS = _exercise("predict_allreduce_ms", "a ring all-reduce's time on a datasheet's link", "predict_allreduce_ms",
                       _ms_cases, _check_ms, COSTS)
RS = _exercise("ring_reduce_scatter", "ring reduce-scatter, NCCL's order, every hop rounded", "ring_reduce_scatter",
               _rs_cases, _check_rs, COLLECTIVES)
AG = _exercise("ring_all_gather", "ring all-gather: every rank ends with every shard", "ring_all_gather", _ag_cases,
               _check_ag, COLLECTIVES)
AR = _exercise("ring_all_reduce", "ring all-reduce: the reduce-scatter, then the all-gather", "ring_all_reduce",
               _ar_cases, _check_ar, COLLECTIVES)
TREE = _exercise("tree_all_reduce", "a binary tree's all-reduce, every add rounded", "tree_all_reduce", _tree_cases,
                 _check_tree, COLLECTIVES)

V, H = "visible", "after_published"
PARTS = (
    Part("A", "Predict before you code (checked when you submit, with the reason)", 1.5,
         tests_of(__name__, globals(), "P2048", PREDICT_2048, [(slice(0, 1), 0.5, V), (slice(1, 2), 0.5, V)])
         + tests_of(__name__, globals(), "PBYTES", PREDICT_BYTES, [(slice(0, 1), 0.5, V), (slice(1, 3), 0.5, V)])
         + tests_of(__name__, globals(), "PMS", PREDICT_MS, [(slice(0, 1), 0.5, V), (slice(1, 2), 0.5, V)])),
    Part("B", "The ring reduce-scatter", 3.0,
         tests_of(__name__, globals(), "RS", RS, [(slice(0, 1), 0.5, V), (slice(1, 2), 1, V), (slice(2, 3), 0.5, V),
                                                  (slice(3, 5), 1, H), (slice(5, 6), 1, H), (slice(6, 7), 1, H),
                                                  (slice(7, 8), 0.5, H)])),
    Part("C", "The ring all-gather", 1.0,
         tests_of(__name__, globals(), "AG", AG, [(slice(0, 2), 1, V), (slice(2, 4), 1, H)])),
    Part("D", "The all-reduce from your two halves", 1.0,
         tests_of(__name__, globals(), "AR", AR, [(slice(0, 2), 1, V), (slice(2, 5), 1, H)])),
    Part("E", "A tree all-reduce (seed 001's other topology)", 1.5,
         tests_of(__name__, globals(), "TREE", TREE, [(slice(0, 2), 1, V), (slice(2, 4), 1, H)])),
    Part("F", "Explain (a page, graded by hand)", 1.0, (), written=True),
)

HANDOUT = f"""\
# Assignment 1: the ring, the tree, and where 16 bits lose information

You will predict what a ring all-reduce sends and how long it takes, then write the two halves of a ring all-reduce
exactly as NCCL orders them — every hop rounding to the format on the wire — compose them, write a tree all-reduce
beside it, and explain why four ranks summing 2048 + 1 + 1 + 1 in fp16 do not all agree. Plan on about nine hours.

**Read first:** notebook 02 (`notebooks/02_ring_and_rounding.ipynb`), notebook 05's "Ring or tree"
(`notebooks/05_time_and_overlap.ipynb`), `docs/nccl_mapping.md` (NCCL's ring order, and where NCCL's own
all-reduce differs), `docs/glossary.md` (ring, phase, hop, wire format); the seeds' claims this assignment tests
are rows of `docs/seeds.md`.

{handout_points(PARTS)}

Start with `zerosim assignment starter 1 > a1_ring.py`; `zerosim assignment check 1 --file a1_ring.py` runs the
visible tests (part A's predictions among them: each says how far off you are and why, before you submit). Hidden
tests (padding, one rank, eight ranks, bf16) run when you submit; their results appear once grades are published.
A wrong answer that matches a known mistake is named: "Misconception 'round_once': ...".

## A. Predict (before writing any code)
* `predict_2048()`: rank 0 holds 2048 in each of its 4 elements, ranks 1-3 hold 1. After a ring reduce-scatter
  in fp16, what does each rank own? And in bf16? (fp16 keeps 11 significant bits, bf16 8; ties round to even.)
* `predict_ring_bytes(N, elements, itemsize)`: how many bytes does one rank send in a ring all-reduce?
* `predict_allreduce_ms(gigabytes, N, link_GBps, alpha_us)`: how long does it take? The link's figure is the
  datasheet's, *bidirectional* — read seed 001 §8's 31 ms and decide whether to trust it.

## B. The ring reduce-scatter
`ring_reduce_scatter(xs, wire)`: N ranks, each with a 1-D array of L values. Pad to a multiple of N with zeros, cut
into N equal chunks of s = ceil(L / N); rank r ends owning chunk r (only its real elements). Step k (k = 0..N-2):
rank i sends its partial of chunk (i - k - 1) mod N to rank i + 1, which adds its own copy. So the sum for chunk c
starts at rank c + 1 and is `((x[c+1] + x[c+2]) + ...) + x[c]`. Cast the inputs to `wire` first; **every add
rounds to `wire`** (as NCCL's kernels do).

## C. The ring all-gather
`ring_all_gather(shards)`: rank r holds shard r; every rank ends with all of them, in rank order.

## D. The all-reduce
`ring_all_reduce(xs, wire)`: your reduce-scatter, then your all-gather. It must equal `zerosim.all_reduce` bit for
bit — chunks 0 and 1 of 2048 + 1 + 1 + 1 end at 2052 on every rank, chunks 2 and 3 at 2048.

## E. A tree all-reduce
`tree_all_reduce(xs, wire)`: rank r's children are 2r + 1 and 2r + 2; each rank adds its left child's partial sum
to its own, then its right child's, rounding every add; the root's sum goes back down to every rank. Graded
against `zerosim.collectives.tree_all_reduce`. Then read `ring_tree_crossover`: why does NCCL pick the tree for
small messages on many ranks and the ring for a gradient's gigabytes?

## F. Explain (a page, in your write-up)
Which hops rounded in 2048 + 1 + 1 + 1; why chunks 0 and 1 end at 2052 while 2 and 3 end at 2048, and why the exact
sum 2051 is on no rank; what bf16 and an fp32 wire change; why your tree's answer differs from your ring's; and
which of your predictions in part A were off, and why.
"""

ASSIGNMENT = Assignment(1, "collectives and rounding: the ring, the tree, 16 bits", HANDOUT, STARTER,
                        tuple(t for p in PARTS for t in p.tests), "a1_ring.py", parts=PARTS)
