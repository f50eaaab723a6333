"""The least work the design keeps in a small model's step on many ranks, against the default engine, in turns.

Issue 63's Must show 2 at 10k parameters on N = 64 holds the default ZeRO-3 bf16 step to 2.5 times a hand-written
NumPy step (benchmarks/hand_zero3.py `FastHandZero3`, the machine's sgemm). Whatever its glue does, the engine keeps
three things that hand step does not do, and this script measures a hand step that does each at the least NumPy
allows, so that engine ÷ floor says how much of the gap is the engine's own and floor ÷ hand how much is the design's:

    portable  every product is the exact dot product rounded once to fp32 (the design's portable arithmetic): one
              float64 GEMM of the rank's stacked operands, rounded once, and the least proof that its sums are exact,
              read from the operands alone (`facts`: each line's largest exponent and its smallest nonzero one, the
              engine's `extents`; no pass over the product), the few elements it cannot clear settled (`settled`)
    rings     a reduce-scatter call per layer, as the engine's ZeRO-3 sends each layer's gradients (its trace holds a
              call per layer): the same ring adds, by layer (the hand step adds every layer's at once)
    records   every ledger event the engine's step makes (read from its ledgers: the same kinds, bytes and order,
              32 a rank at 10k / N = 64) kept as the cheapest honest bookkeeping: per rank, the kind's and the total's
              running sums, the peaks and a sequence number updated and one timeline tuple appended (also to the
              log), and every `Compute` event the engine logs appended as one tuple; "floor" does it rank by rank,
              "batched" with the ranks as one array dimension (one NumPy update of the n ranks' sums an event, one
              tuple; each rank's timeline to be made on read), the least a design of alike ranks could keep; the
              step's 9 `Call`s and their ring phases, one log entry each, are left out (a few appends)

Contenders, each round in a new seeded order, CPU time of this process (BLAS on one thread), median of --repeats
after a warm-up round, each ÷ the hand step with the quartiles of the rounds' own ratios:

    hand      FastHandZero3 (native sgemm)                    portable  hand + portable products
    rings     portable + a ring per layer                     floor     rings + records, rank by rank
    batched   rings + records, the ranks as one dimension     engine    ZeroEngine(..., Cluster(N), 3, ...), defaults
    unrecorded  the engine with no records at all (no ledger bookkeeping, no ledger or `Compute` events logged from
              its stacked ops, no window): what is left that no way of keeping the records could take off (`Unrecorded`)

The engine keeps its trace as a user's run does (its window holds the last steps and folds the oldest: every rank's
timeline let go of, cluster/_window.py); the floors' records are emptied every round, that folding left out. Until
2026-11-26 (the eleventh round) the engine's trace was emptied every round too, which left its fold out as well (the
engine ~7-13 % faster than a run: benchmarks/yardstick.py --clear-trace).

After every round the masters of every contender but the hand step (whose products are sgemm's) are checked to equal
the engine's bit for bit: the floors do the engine's arithmetic, not less (tests/test_benchmark_small_floor.py holds
the product, the settling and the bookkeeping to independent answers).

    python benchmarks/small_floor.py [--repeats 21]

Only the small case (10k parameters on N = 64): there the products' facts leave ~8 elements a step unsure, and a
Fraction sum settles one every few steps. At 919k on N = 8 the same facts leave ~29,000 a step, ~1,400 of them past
the per-element bound, whose Fraction sums make this floor dearer than the engine (whose proof bounds such products
by their norms: benchmarks/proof_bound.py measures the least proof at that size).
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from fractions import Fraction  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, however this file is run
from hand_zero3 import F32, FastHandZero3  # noqa: E402
from hand_zero3 import add_bf16 as hand_add_bf16  # noqa: E402
from peers import forget_kept_operands, measured_tree  # noqa: E402
from trees import quartiles, rounds  # noqa: E402
from yardstick import CASES, policy  # noqa: E402

F64 = np.float64
UNSURE = [0, 0]  # elements the facts left unsure, and of them those summed exactly: counted, printed a step
LIMIT = 2.0**53  # a partial sum of whole multiples of q below 2**53·q is a float64


def facts(x: np.ndarray, axis: int) -> np.ndarray:
    """Each line's largest magnitude over its quantum (the ulp of its smallest nonzero element) along `axis` (K), an
    upper bound read from the bits of bf16 values held in float32: 2**(largest exponent - smallest nonzero one + 8).
    A zero's bits, 0, wrap to the largest under the `- 1`, so the min finds the smallest nonzero magnitude; a
    subnormal's exponent field, 0, counts as 1 (bf16's subnormals are whole multiples of its smallest normal's ulp)."""
    m = np.abs(x).view(np.uint32)
    hi = np.maximum(m.max(axis=axis) >> 23, 1).astype(np.int64)
    m -= 1
    lo = np.maximum((m.min(axis=axis) + 1) >> 23, 1).astype(np.int64)
    return np.ldexp(1.0, np.maximum(hi - lo, 0) + 8)


def rounded_exactly(terms) -> np.float32:
    """The exact sum of float64 `terms` rounded once to float32, to nearest even (Fraction: no double rounding)."""
    s = Fraction(0)
    for t in terms:
        s += Fraction(float(t))
    near = np.float32(float(s))  # within one float32 ulp of the answer: check it and its neighbours
    options = [np.nextafter(near, np.float32(-np.inf)), near, np.nextafter(near, np.float32(np.inf))]
    best = min(options, key=lambda v: (abs(Fraction(float(v)) - s), int(np.array(v).view(np.uint32)) & 1))
    if best == 0:  # an exact zero is +0, as the engine gives it; a negative sum too small for float32 is -0
        return np.float32(-0.0) if s < 0 else np.float32(0.0)
    return best


def settled(a64: np.ndarray, b64: np.ndarray, c: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """c (..., M, N) float64 rounded to float32, exact wherever K·(max|a_i|/q_i)·(max|b_j|/q_j) < 2**53 (every partial
    sum a float64); the elements that bound does not clear are found, then those whose own Σ_k|a_ik·b_kj| / (q_i·q_j)
    stays below 2**53 kept (the same argument, element by element), and the rest summed exactly (`rounded_exactly`)."""
    c += 0.0  # an exact zero is +0
    out = c.astype(F32)
    if rows.max() * cols.max() < LIMIT:
        return out
    lead = np.broadcast_shapes(a64.shape[:-2], b64.shape[:-2])
    a64, b64 = np.broadcast_to(a64, lead + a64.shape[-2:]), np.broadcast_to(b64, lead + b64.shape[-2:])
    rows, cols = np.broadcast_to(rows, lead + rows.shape[-1:]), np.broadcast_to(cols, lead + cols.shape[-1:])
    largest = cols.max(axis=-1, keepdims=True)  # (..., 1): a row is sure where its largest column clears it
    *at_rows, i_rows = np.nonzero(rows * largest >= LIMIT)  # the few rows that are not
    picked = rows[(*at_rows, i_rows)][:, None] * cols[tuple(at_rows)] >= LIMIT  # (rows, N) their columns
    row, j = np.nonzero(picked)
    where = (*(x[row] for x in at_rows), i_rows[row], j)
    *at, i, _ = where
    a_rows, b_columns = a64[(*at, i)], np.swapaxes(b64, -1, -2)[(*at, j)]  # (count, K) each
    products = a_rows * b_columns  # exact: 16-bit significands
    q = quantum(a_rows) * quantum(b_columns)  # every product, so every partial sum, a whole multiple of q
    unsure = np.abs(products).sum(axis=-1) / q >= LIMIT / 2  # / 2: the float64 sum of |p| itself rounds
    UNSURE[0] += len(j)
    UNSURE[1] += int(unsure.sum())
    for e in np.flatnonzero(unsure):
        out[tuple(w[e] for w in where)] = rounded_exactly(products[e])
    return out


def quantum(lines: np.ndarray) -> np.ndarray:
    """(count, K) float64 lines of bf16 values: each line's quantum, the ulp of its smallest nonzero element
    (2**(exponent - 7), at least bf16's subnormal ulp 2**-133); 1 for a line of zeros."""
    magnitudes = np.abs(lines)
    smallest = np.min(magnitudes, axis=-1, where=magnitudes > 0, initial=np.inf)
    _, exponent = np.frexp(np.where(np.isfinite(smallest), smallest, 1.0))  # smallest = f·2**exponent, 0.5 <= f < 1
    return np.ldexp(1.0, np.maximum(exponent - 8, -133))


def portable_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(..., M, K) @ (..., K, N) of bf16 values held in float32: the exact dot products rounded once to fp32, by one
    float64 GEMM and the least proof that its sums are exact (`facts`, `settled`)."""
    k = a.shape[-1]
    rows, cols = k * facts(a, -1), facts(b, -2)
    a64, b64 = a.astype(F64), b.astype(F64)
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    if shape not in _C:  # c's float64 buffer, one a shape, reused step after step (as the engine's kernel keeps its
        _C[shape] = np.empty(shape)  # own): a fresh 3 MB array a product costs page faults no run pays
    return settled(a64, b64, np.matmul(a64, b64, out=_C[shape]), rows, cols)


_C = {}


class Portable(FastHandZero3):
    """The hand step with the design's portable products."""

    matmul = staticmethod(portable_matmul)


def add_bf16(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """bf16 a + b into `out` the cheaper way for its size: ml_dtypes' own add below 2,048 elements (one call), the
    hand step's widened add above (the same bits, zerosim/collectives/_ops.py `add_bf16` says why)."""
    if a.size < 2048:
        np.add(a, b, out=out)
    else:
        hand_add_bf16(a, b, out)


class Rings(Portable):
    """... and a reduce-scatter per layer, last layer first, as the engine calls them: each a ring over the chunks the
    layer's window touches, its addends gathered once (row k: every chunk's addend from ring position c + k) and
    added a ring step at a time (a chunk shared by two layers is summed by both, the same adds in the same order:
    the same bits)."""

    add = staticmethod(add_bf16)

    def reduce_scatter(self) -> None:
        n, s = self.n, self.s
        if n == 1:
            return super().reduce_scatter()
        chunks, acc = self.grads.reshape(n, n, s), self.reduced.reshape(n, s)  # (rank, chunk, s), (chunk, s)
        for w, b, _ in reversed(self.layers):
            owners = np.arange(w.start // s, (b.stop - 1) // s + 1)  # the chunks (their owners) the window touches
            terms = chunks[(owners + np.arange(n)[:, None]) % n, owners]  # (n, chunks, s): terms[k] from c + k
            mine = acc[owners[0]:owners[-1] + 1]
            self.add(terms[1], terms[2 % n], mine)
            for k in range(3, n + 1):
                self.add(mine, terms[k % n], mine)


class Records:
    """The engine's step's ledger events and `Compute` events kept at the least: `per_rank` rank by rank (each rank's
    sums, peaks, sequence and timeline), `batched` with the ranks as one array dimension."""

    def __init__(self, n: int, events: list, computes: int):
        self.n, self.events, self.computes = n, events, computes  # (action, name, kind, nbytes) of one rank's step
        self.current, self.peak = [{} for _ in range(n)], [{} for _ in range(n)]
        self.total, self.peak_total, self.seq = [0] * n, [0] * n, [0] * n
        self.timelines, self.log, self.live = [[] for _ in range(n)], [], [{} for _ in range(n)]
        self.kinds = {k: i for i, k in enumerate(sorted({kind for _, _, kind, _ in events}))}
        self.held = {}  # batched: name -> bytes held on every rank
        self.sums = np.zeros((len(self.kinds), n), np.int64)  # batched: (kind, rank)
        self.peaks = np.zeros_like(self.sums)
        self.totals, self.peak_totals, self.count = np.zeros(n, np.int64), np.zeros(n, np.int64), 0

    def per_rank(self) -> None:
        log, n = self.log, self.n
        for action, name, kind, nbytes in self.events:  # each op's n ranks' events, rank after rank
            change = nbytes if action == "alloc" else -nbytes
            for r in range(n):
                live = self.live[r]  # the buffers held by name: a name live twice, a double free are refused
                if action == "alloc":
                    if name in live:
                        raise ValueError(f"rank {r}: {name!r} is live already")
                    live[name] = nbytes
                else:
                    del live[name]
                current = self.current[r]
                kind_total = current[kind] = current.get(kind, 0) + change
                total = self.total[r] = self.total[r] + change
                if change > 0:
                    peak = self.peak[r]
                    if kind_total > peak.get(kind, 0):
                        peak[kind] = kind_total
                    if total > self.peak_total[r]:
                        self.peak_total[r] = total
                seq = self.seq[r] = self.seq[r] + 1
                event = (seq, action, name, kind, nbytes, total, kind_total, "", r)
                self.timelines[r].append(event)
                log.append(event)
        log.extend(("compute", r) for r in range(self.computes))

    def batched(self) -> None:
        log = self.log
        for action, name, kind, nbytes in self.events:
            if action == "alloc":
                if name in self.held:
                    raise ValueError(f"{name!r} is live already")
                self.held[name] = nbytes
            else:
                del self.held[name]
            k = self.kinds[kind]
            change = nbytes if action == "alloc" else -nbytes
            self.sums[k] += change
            self.totals += change
            if change > 0:
                np.maximum(self.peaks[k], self.sums[k], out=self.peaks[k])
                np.maximum(self.peak_totals, self.totals, out=self.peak_totals)
            self.count += 1
            log.append((self.count, action, name, kind, nbytes))
        log.extend(("compute",) for _ in range(self.computes // self.n))

    def clear(self) -> None:  # between rounds: what a run's trace window lets go of
        self.log.clear()
        for t in self.timelines:
            t.clear()


class Floor(Rings):
    """Rings, and the step's records kept (`how`: "per_rank" or "batched")."""

    def __init__(self, widths, n, params, events, computes, how: str):
        super().__init__(widths, n, params)
        self.records, self.how = Records(n, events, computes), how

    def step(self, batches) -> list:
        losses = super().step(batches)
        getattr(self.records, self.how)()
        return losses


class Unrecorded:
    """The default engine with its records switched off while it steps: no ledger keeps totals, peaks or a timeline
    (`_noted`, cluster/_ledger.py, does nothing), no stacked op's ledger or `Compute` events reach the log
    (`Trace.record_ranks` does nothing), and no window folds (`keep_steps=None`, its trace emptied between rounds as
    the floors' records are). What is left is the engine's arithmetic, collectives and glue: engine ÷ unrecorded is
    the most that keeping the records differently (batched over the ranks, or made on read) could take off the step,
    and unrecorded ÷ hand what it could not. Its masters are held to the engine's every round (records change no
    bit)."""

    def __init__(self, widths, n, params):
        from zerosim import MLP, Adam, Cluster, ZeroEngine

        self.engine = ZeroEngine(MLP(widths), Cluster(n, timeline=False, keep_steps=None), 3, Adam(lr=1e-3),
                                 policy("portable"), params=params)
        self.engine.cluster.trace.record_ranks = lambda columns, sinks: None  # this trace's only

    def step(self, batches) -> list:
        from zerosim.cluster import _ledger

        noted, _ledger._noted = _ledger._noted, _off
        try:
            return self.engine.step(batches)
        finally:
            _ledger._noted = noted

    def full_master(self):
        return self.engine.full_master()

    def clear(self) -> None:  # between rounds, untimed: the log it keeps without a window
        self.engine.cluster.trace.clear()


def _off(*_):
    """`_noted` switched off: no totals, peaks, sequence or event (`Unrecorded`)."""
    return None


def engine_records(engine, batches) -> tuple:
    """(rank 0's ledger events of one step as (action, name, kind, nbytes), the `Compute` events logged), read from the
    engine's own ledgers and log: one step made on it, its trace cleared after. Every rank's events are rank 0's."""
    trace = engine.cluster.trace
    trace.clear()
    before = len(engine.cluster.ranks[0].ledger.timeline)
    engine.step(batches)
    ledgers = [rank.ledger for rank in engine.cluster.ranks]
    mine = [(e.action, e.name, e.kind, e.nbytes) for e in ledgers[0].timeline[before:]]
    if any([(e.action, e.name, e.kind, e.nbytes) for e in ledger.timeline[before:]] != mine for ledger in ledgers):
        raise SystemExit("the ranks' ledgers made different events: the floor replays rank 0's for every rank")
    computes = sum(type(e).__name__ == "Compute" for e in trace.log)
    trace.clear()
    return mine, computes


def contenders(widths, n: int, batches) -> dict:
    from zerosim import MLP, Adam, Cluster, ZeroEngine

    params = MLP(widths).init_params()
    engine = ZeroEngine(MLP(widths), Cluster(n), 3, Adam(lr=1e-3), policy("portable"), params=params)
    events, computes = engine_records(engine, batches)
    engine = ZeroEngine(MLP(widths), Cluster(n), 3, Adam(lr=1e-3), policy("portable"), params=params)
    return {"hand": FastHandZero3(widths, n, params), "portable": Portable(widths, n, params),
            "rings": Rings(widths, n, params), "floor": Floor(widths, n, params, events, computes, "per_rank"),
            "batched": Floor(widths, n, params, events, computes, "batched"),
            "unrecorded": Unrecorded(widths, n, params), "engine": engine}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=rounds, default=21)
    args = p.parse_args()
    from zerosim.models import make_regression

    widths, n, batch, target = CASES["small"]
    batches = make_regression(np.random.default_rng(0), n, batch, widths)
    runs = contenders(widths, n, batches)
    print(f"zerosim from {measured_tree()}; {widths} on N = {n}, {batch} rows a rank; load average before "
          f"{os.getloadavg()[0]:.2f}; the ledger events replayed: {len(runs['floor'].records.events)} a rank, "
          f"{runs['floor'].records.computes} Compute events a step")
    cpu, order = {k: [] for k in runs}, random.Random(0)
    for round_ in range(args.repeats + 1):  # round 0 warms up
        names = list(runs)
        order.shuffle(names)
        for name in names:
            forget_kept_operands(False)
            start = time.process_time()
            runs[name].step(batches)
            if round_:
                cpu[name].append(time.process_time() - start)
        runs["floor"].records.clear()
        runs["batched"].records.clear()
        runs["unrecorded"].clear()
        master = runs["engine"].full_master()
        for name in ("portable", "rings", "floor", "batched", "unrecorded"):
            if not np.array_equal(runs[name].full_master().view(np.uint32), master.view(np.uint32)):
                raise SystemExit(f"{name}'s masters left the engine's in round {round_}")
    hand = statistics.median(cpu["hand"])
    print(f"{'contender':>10} {'CPU ms':>7}  ÷ hand (q1-q3 of the rounds' own ratios)")
    for name, xs in cpu.items():
        q1, q3 = quartiles(sorted(x / y for x, y in zip(xs, cpu["hand"])))
        print(f"{name:>10} {statistics.median(xs) * 1e3:7.2f}  {statistics.median(xs) / hand:.2f} ({q1:.2f}-{q3:.2f})")
    steps = 4 * (args.repeats + 1)  # the four contenders that multiply with `portable_matmul`
    print(f"the elements the products' facts left unsure: {UNSURE[0] / steps:.1f} a step, summed exactly "
          f"{UNSURE[1] / steps:.1f}")
    print(f"the floors' masters equal the engine's after every round; target engine ÷ hand <= {target}; load average "
          f"after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
