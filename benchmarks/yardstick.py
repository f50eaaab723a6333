"""The honest yardstick: a ZeRO-3 step written by hand in NumPy, beside the engine and the oracle, in one run.

`benchmarks/engine.py` measures the engine against the oracle, but the oracle runs zerosim's own layer code, so a
cost both pay (a format looked up per op, a cast through the checking front door) never shows. This script writes
the same step with no zerosim code at all: per rank, per layer, the matmuls, casts and adds the engine makes, in the
same order, on arrays a rank would hold, and checks that its fp32 masters equal the engine's bit for bit after
every timed step (so it cannot be faster by doing less arithmetic).

What the hand step does, for an MLP (Linear/ReLU pairs, half-MSE) in bf16-mixed with Adam (seed formula), N ranks:

    x_r = bf16(x_r)                                                 each rank's micro-batch, rounded once
    forward, layer by layer:  W = all-gather(rank shards of the layer's window)   (a copy on every rank)
                              y = bf16(f32(x) @ f32(W).T + f32(b));   ReLU: y[f32(x) <= 0] = 0
    loss:                     d = f32(y) - t;  L = 0.5 Σ d² / B;  dy = bf16((d / B) * 1)
    backward, last layer first: W gathered again;  dx = bf16(f32(dy) @ f32(W));  dW = bf16(f32(dy).T @ f32(x));
                              db = bf16(Σ_B f32(dy));  the layer's (dW, db) packed and reduce-scattered in bf16:
                              chunk c = ((g[c+1] + g[c+2]) + ...) + g[c], every add rounded to bf16 (NCCL's ring)
    overflow check:           every rank counts inf/NaN in its gradient shard
    update, rank by rank:     g32 = f32(shard) / N;  Adam in fp32 over 2**17-element blocks;  params = bf16(master)

The engine, with one worker (`Cluster(N)`'s default), runs each Linear, ReLU and the loss once for every rank, their
micro-batches stacked row by row, where that gives every rank its own run's bits (zerosim/models/_stacked.py: the
portable kernels); the hand step stays the obvious loop over ranks the issue named, so at 64 ranks the engine makes
fewer, larger NumPy calls than it. The bit check after every round holds both to the same arithmetic.

The ring's adds are written the obvious vectorised way (one add over every chunk per ring step, each element's
adds in the ring's order): elementwise, so the same bits as adding chunk by chunk.

Targets (issue 41, Must show 1), engine ÷ hand NumPy with the default `Cluster(N)` (an event per hop, the ledgers'
timelines): <= 1.3 at 919k parameters on N = 8, <= 2.5 at 10k parameters on N = 64. The oracle
(`Reference(order="ring-native")`, the README's yardstick) is shown against the same hand step.

Measured in one run, in CPU time (and wall time beside it): each round runs every contender once, in a new seeded
order (all see the same machine load, none always follows another), median of --repeats, BLAS pinned to one thread
(set before numpy loads). The load average is printed before and after. Before each contender's step the portable
kernels' memo of operands is emptied (untimed): a step alone keeps what it measured for its own later products,
never for another contender's (the engine and the oracle multiply the same operands bit for bit). Their scratch
buffers, memory that holds no measurement, stay from step to step, as in a run (`forget_kept_operands`; until
2026-11-26 they went too, and --drop-buffers measures that way: ~1,000 page faults a step at 10k / N = 64 that no run
pays). Each engine keeps its trace as a user's run keeps it: a `Cluster(N)`'s window holds the last steps and folds
the oldest, every rank's ledger timeline with it (cluster/_window.py). Until 2026-11-26 (the eleventh round) this
script emptied the engines' traces after every round, so the engine never folded: at 10k / N = 64 that step was
~13 % faster than a user's (11.6-11.7 against 13.3-13.7 ms in turns); --clear-trace measures that way.

Under each arithmetic of the models' kernels (`MixedPrecision(arithmetic=...)`, zerosim/precision/arithmetic/):
"native" multiplies with the machine's sgemm (the hand step: `f32(x) @ f32(W).T`); "portable", the default, rounds
each exact dot product once to fp32 (the same bits on every machine). The hand step's portable product is one float64
GEMM rounded to fp32: a product of two bf16 values has at most 16 significant bits, and a row of K <= 1024 of them whose
exponents span fewer than 53 - 16 - 10 = 27 binades sums exactly in float64 in any order, so rounding that sum once is
the engine's answer (the per-round check would catch a row where it is not). The last column puts each engine against
the native hand step: what a step costs beside plain fp32 NumPy, the portable kernel's price included.

    python benchmarks/yardstick.py [--repeats 9] [--case small|large|both] [--arithmetic native|portable|both]
                                   [--hand-adds ml_dtypes|float32] [--drop-buffers] [--tree DIR]

The engine adds a bf16 wire's chunks in float32, rounded once to bf16 (collectives/_ops.py `add_bf16`: ml_dtypes'
bits in half its time); the hand step adds with ml_dtypes' own add, the obvious way, unless --hand-adds float32,
which gives it the engine's way too: the ratios then measure zerosim's overhead alone, not its adds.

Issue 63's yardstick is a second hand step, as fast as plain NumPy allows (benchmarks/hand_zero3.py `FastHandZero3`:
every rank's products one batched call, everything else once for all ranks, the ring once for the whole buffer; its
note says how it was made so). It multiplies with the machine's sgemm, so it is checked against the native engine:
after every round its masters equal that engine's bit for bit. The last column puts each engine against it: the
default (portable) engine ÷ this step is issue 63's Must show 2 (<= 1.3 at 919k on N = 8, <= 2.5 at 10k on N = 64).

With --tree DIR, every contender of another source tree (e.g. a checkout of the commit before a change) steps in the
same rounds, in turns with this tree's: each tree's contenders in a worker process of their own, fed the same
parameters and batches, each step's CPU seconds measured inside its worker (benchmarks/trees.py says why and how).
The hand steps are this tree's code on both sides, so their this ÷ that shows how far two workers' medians differ
for the same work. After every round each tree's engine, oracle and hand steps are checked as above (this tree's
disagreeing stops the run; the other tree's is printed), and the two trees' engines' masters are compared: trees that
differ in bits on purpose print the difference.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/hand_zero3.py, however this file is run
from hand_zero3 import FastHandZero3  # noqa: E402
from peers import forget_kept_operands, measured_tree  # noqa: E402  (the memos emptied, the scratch buffers kept)
from trees import Side, compared, in_turns, quartiles, rounds, source_tree, started, workers_apart  # noqa: E402  (--tree: another tree's contenders in turns)

BF16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)
BLOCK = 2**17  # Adam's blocks, as the engine steps a shard (the same bits as one whole step: nothing mixes elements)

CASES = {  # name: (widths, ranks N, batch per rank, target engine ÷ hand)
    "large": ([256, 1024, 512, 256], 8, 32, 1.3),  # 919,296 params: the arithmetic dominates
    "small": ([32, 96, 64, 16], 64, 8, 2.5),  # 10,416 params: per-rank, per-layer Python dominates
}


def native_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(M, K) @ (K, N) bf16 -> (M, N) fp32: the machine's sgemm on the widened inputs."""
    return a.astype(F32) @ b.astype(F32)


def exact_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(M, K) @ (K, N) bf16 -> (M, N) fp32: the exact dot products rounded once (exact in float64 here: see above)."""
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(F32)


MATMULS = {"native": native_matmul, "portable": exact_matmul}


def add_widened(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """bf16 a + b into `out` by way of float32: the same bits as ml_dtypes' add (float32 holds any two bf16 values'
    sum to within a rounding that the one to bf16 cannot tell apart), the way the engine adds a bf16 wire's chunks
    of 2,048 elements and more (--hand-adds float32)."""
    if a.size < 2048:
        return np.add(a, b, out=out)
    out[...] = np.add(b.astype(F32), a.astype(F32))  # b + a: a NaN + NaN keeps ml_dtypes' sign on x86 too
    return out


ADDS = {"ml_dtypes": np.add, "float32": add_widened}


class HandZero3:
    """ZeRO-3 on N ranks for an MLP [D_0, ..., D_K] with ReLU, half-MSE, bf16-mixed, Adam (lr, 0.9, 0.999, 1e-8):
    plain NumPy, one list entry per rank."""

    def __init__(self, widths, n: int, params: np.ndarray, lr: float = 1e-3, arithmetic: str = "native",
                 adds: str = "ml_dtypes"):
        self.n, self.widths = n, widths
        self.matmul, self.add = MATMULS[arithmetic], ADDS[adds]
        shapes = [((o, i), (o,)) for i, o in zip(widths[:-1], widths[1:])]
        self.windows, offset = [], 0  # (a, b) of each Linear's [W, b] in the flat vector
        for (w, b) in shapes:
            size = w[0] * w[1] + b[0]
            self.windows.append((offset, offset + size))
            offset += size
        self.shapes, p = shapes, offset
        self.s = -(-p // n)  # shard size, Ψ = N s
        padded = np.zeros(n * self.s, np.float64)
        padded[:p] = params
        flat32 = padded.astype(F32)
        self.master = [flat32[r * self.s:(r + 1) * self.s].copy() for r in range(n)]  # (s,) fp32 per rank
        self.params = [m.astype(BF16) for m in self.master]  # (s,) bf16 per rank (fp32 -> bf16: one rounding)
        self.grads = [np.zeros(self.s, BF16) for _ in range(n)]  # (s,) bf16 reduced gradient shard per rank
        self.m = [np.zeros(self.s, F32) for _ in range(n)]
        self.v = [np.zeros(self.s, F32) for _ in range(n)]
        self.t = 0
        b1, b2 = 0.9, 0.999
        # scalars formed in float64, rounded once to fp32 (a Python double handed to an fp32 kernel)
        self.c = dict(b1=F32.type(b1), nb1=F32.type(1.0 - b1), b2=F32.type(b2), nb2=F32.type(1.0 - b2),
                      lr=F32.type(lr), eps=F32.type(1e-8), betas=(b1, b2))
        # which rank owns which piece of each window: counts[r] of window ∩ shard_r
        self.pieces = []
        for a, b in self.windows:
            owned = []
            for r in range(n):
                lo, hi = max(a, r * self.s), min(b, (r + 1) * self.s)
                owned.append((lo - r * self.s, hi - r * self.s) if hi > lo else (0, 0))
            self.pieces.append(owned)

    def gather(self, layer: int) -> list:
        """All-gather: every rank's copy of the layer's (b - a,) bf16 window (W then b)."""
        joined = np.concatenate([self.params[r][lo:hi] for r, (lo, hi) in enumerate(self.pieces[layer])])
        return [joined.copy() for _ in range(self.n)]

    def unpack(self, layer: int, window: np.ndarray) -> tuple:
        (wo, wi), _ = self.shapes[layer]
        return window[: wo * wi].reshape(wo, wi), window[wo * wi:]

    def reduce_scatter(self, layer: int, packed: list) -> None:
        """The ring's sum of the N ranks' (b - a,) bf16 gradients, chunk c (rank c's piece) summed from rank c+1 on:
        ((g[c+1] + g[c+2]) + ...) + g[c] in bf16, straight into rank c's gradient shard. (One add over every chunk
        per ring step, with fancy indexing, gives the same bits but was slower here at N = 8 and no faster at 64.)"""
        n, a = self.n, self.windows[layer][0]
        for c, (lo, hi) in enumerate(self.pieces[layer]):
            if hi <= lo:
                continue
            window = slice(c * self.s + lo - a, c * self.s + hi - a)
            acc = self.grads[c][lo:hi]  # (hi - lo,) bf16: rank c's piece of its shard
            if n == 1:
                acc[...] = packed[0][window]
                continue
            self.add(packed[(c + 1) % n][window], packed[(c + 2) % n][window], out=acc)
            for k in range(3, n + 1):
                self.add(acc, packed[(c + k) % n][window], out=acc)  # one bf16 rounding per add, the ring's order

    def step(self, batches) -> list:
        n, layers = self.n, len(self.windows)
        xs = [x.astype(BF16) for x, _ in batches]  # (B, D_0) bf16
        saved, losses = [[None] * layers for _ in range(n)], []
        for i in range(layers):  # forward
            windows = self.gather(i)
            for r in range(n):
                w, b = self.unpack(i, windows[r])
                x = xs[r]
                y = (self.matmul(x, w.T) + b.astype(F32)).astype(BF16)
                relu = i < layers - 1
                saved[r][i] = (x, y if relu else None)
                if relu:
                    y = y.copy()
                    y[y.astype(F32) <= 0] = 0
                xs[r] = y
        dys = []
        for r in range(n):  # loss
            y, t = xs[r], batches[r][1]
            d = y.astype(F32) - t
            losses.append(float(0.5 * np.sum(d * d, dtype=F32) / y.shape[0]))
            dys.append(((d / F32.type(d.shape[0])) * F32.type(1.0)).astype(BF16))
        for i in reversed(range(layers)):  # backward
            windows, packed = self.gather(i), []
            for r in range(n):
                w, _ = self.unpack(i, windows[r])
                x, pre = saved[r][i]
                dy = dys[r]
                if pre is not None:  # the ReLU after this Linear
                    dy = dy.copy()
                    dy[pre.astype(F32) <= 0] = 0
                dy32 = dy.astype(F32)
                dys[r] = self.matmul(dy, w).astype(BF16)
                dw = self.matmul(dy.T, x).astype(BF16)
                db = dy32.sum(axis=0, dtype=F32).astype(BF16)
                packed.append(np.concatenate([dw.reshape(-1), db]))
            self.reduce_scatter(i, packed)
        for g in self.grads:  # the overflow check: a static loss scale of 1 raises on inf/NaN
            if not np.isfinite(g.astype(F32)).all():
                raise FloatingPointError("overflow")
        self.t += 1
        c, t = self.c, self.t
        bc1, bc2 = F32.type(1.0 - c["betas"][0] ** t), F32.type(1.0 - c["betas"][1] ** t)
        for r in range(n):
            g32 = self.grads[r].astype(F32) / F32.type(n)
            w, m, v = self.master[r], self.m[r], self.v[r]
            for a in range(0, self.s, BLOCK):
                sl = slice(a, a + BLOCK)
                gb, mb, vb = g32[sl], m[sl], v[sl]
                mb *= c["b1"]
                mb += c["nb1"] * gb
                vb *= c["b2"]
                vb += c["nb2"] * (gb * gb)
                w[sl] -= c["lr"] * (mb / bc1) / (np.sqrt(vb / bc2) + c["eps"])
            self.params[r][...] = w
        return losses

    def full_master(self) -> np.ndarray:
        return np.concatenate(self.master)[: self.windows[-1][1]]


def timed(fn) -> tuple:
    """(CPU seconds this process spent, wall seconds): on a loaded machine the wall clock mostly measures the wait
    for a core, so the ratios below are of CPU time (one thread: BLAS is pinned), the wall ratio beside them."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - t0


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def policy(arithmetic: str):
    """bf16-mixed on the models' kernels `arithmetic` names (a zerosim without the choice runs native only)."""
    from zerosim.precision import get_precision

    base = get_precision("bf16-mixed")
    if not hasattr(base, "arithmetic"):
        if arithmetic != "native":
            raise SystemExit("this zerosim has no portable arithmetic: run with --arithmetic native")
        return base
    return base.with_(arithmetic=arithmetic)


def contenders(widths, n: int, params, arithmetics, adds: str) -> dict:
    """{(who, arithmetic): a step of ZeRO-3 on n ranks from `params`} for who in fast hand (native only), hand,
    engine, oracle, under each of `arithmetics` (native first)."""
    from zerosim import MLP, Adam, Cluster, Reference, ZeroEngine

    model = MLP(widths)
    runs = {("fast hand", "native"): FastHandZero3(widths, n, params)}
    for a in arithmetics:
        runs["hand", a] = HandZero3(widths, n, params, arithmetic=a, adds=adds)
        runs["engine", a] = ZeroEngine(model, Cluster(n), 3, Adam(lr=1e-3), policy(a), params=params)
        runs["oracle", a] = Reference(model, Adam(lr=1e-3), policy(a), world_size=n, params=params,
                                      order="ring-native")
    return runs


def checked(runs: dict, arithmetics, clear_trace: bool = False) -> str | None:
    """After a round: with `clear_trace` the engines' traces emptied (--clear-trace; by default each keeps its trace
    as a user's run does, its window folding the oldest step), then what disagrees, bit for bit, among each
    arithmetic's hand step, engine and oracle and between the fast hand step and the native engine (None: nothing)."""
    for a in arithmetics:
        engine = runs["engine", a]
        if clear_trace and hasattr(engine.cluster.trace, "clear"):
            engine.cluster.trace.clear()
    for a in arithmetics:
        hand, mine, oracle = runs["hand", a].full_master(), runs["engine", a].full_master(), runs["oracle", a].master()
        if not (np.array_equal(hand, mine) and np.array_equal(mine, oracle)):
            return f"{a}: the hand step, the engine and the oracle disagree: not the same arithmetic"
        if a == "native" and not np.array_equal(runs["fast hand", "native"].full_master(), mine):
            return "native: the fast hand step and the native engine disagree"
    return None


def tree_side(widths, n: int, arithmetics, adds: str, params, batches, clear_trace: bool = False) -> Side:
    """The contenders with the zerosim this process imports, for a worker of benchmarks/trees.py (--tree); facts:
    "checked" (after a round) and "masters" ({arithmetic: the engine's fp32 masters})."""
    runs = contenders(widths, n, params, arithmetics, adds)
    return Side({k: (lambda r=r: r.step(batches)) for k, r in runs.items()},
                facts={"checked": lambda: checked(runs, arithmetics, clear_trace),
                       "masters": lambda: {a: runs["engine", a].full_master() for a in arithmetics}})


def bits_apart(mine: np.ndarray, theirs: np.ndarray) -> str:
    """How two fp32 master vectors differ, for a line of output ("" where they hold the same bits)."""
    if mine.shape != theirs.shape:
        return f"shapes {mine.shape} and {theirs.shape}"
    apart = mine.view(np.uint32) != theirs.view(np.uint32)
    if not apart.any():
        return ""
    gap = np.abs(mine[apart].astype(np.float64) - theirs[apart].astype(np.float64))
    return f"{int(apart.sum()):,} of {mine.size:,} elements differ, by at most {np.nanmax(gap):.3g}"


def measure_trees(widths, n: int, batch: int, repeats: int, arithmetics, adds: str, drop_buffers: bool,
                  tree: str, clear_trace: bool = False) -> tuple:
    """({(side, contender): [CPU s of each round]}, {side: the tree its worker imported}, {arithmetic: how the two
    trees' engines' masters differ: "" where the same bits after every round, else the first round they differed
    and how they differ after the last}, what the other tree's own check found) for side "this" (the zerosim this
    script imports) and "that" (`tree`), every contender of both in one shuffled order each round. This tree's own
    check failing stops the run, as without --tree; the other tree's is reported (its bits may differ on purpose)."""
    from zerosim import MLP
    from zerosim.models import make_regression

    arithmetics = tuple(dict.fromkeys(("native", *arithmetics)))
    inputs = dict(widths=list(widths), n=n, arithmetics=arithmetics, adds=adds, params=MLP(widths).init_params(),
                  batches=make_regression(np.random.default_rng(0), n, batch, widths), clear_trace=clear_trace)
    workers, apart, theirs = {}, {a: "" for a in arithmetics}, []

    def after_round(round_):
        when = f"round {round_}" if round_ else "the warm-up round"
        wrong = workers["this"].fact("checked")
        if wrong:
            raise AssertionError(f"round {round_}, this tree: {wrong}")
        wrong = workers["that"].fact("checked")
        if wrong and not theirs:
            theirs.append(f"from {when}: {wrong}")
        mine, other = workers["this"].fact("masters"), workers["that"].fact("masters")
        for a in arithmetics:
            now = bits_apart(mine[a], other[a])
            if now or apart[a]:
                apart[a] = f"{(apart[a] or f'from {when}').split('; ')[0]}; after the last: {now or 'the same'}"

    with started({"this": measured_tree(), "that": tree}, "yardstick", "tree_side", drop_buffers, **inputs) as w:
        workers.update(w)  # after_round asks them
        cpu = in_turns(workers, repeats, after_round=after_round)
        return cpu, {side: worker.tree for side, worker in workers.items()}, apart, (theirs or [""])[0]


def measure(widths, n: int, batch: int, repeats: int, arithmetics, adds: str = "ml_dtypes",
            drop_buffers: bool = False, clear_trace: bool = False) -> tuple:
    """({(who, arithmetic): median CPU s}, {...: median wall s}, {arithmetic: (q1, q3)}) for who in hand, engine,
    oracle: every contender once per round, in a new seeded order; after each round every arithmetic's three fp32
    masters compared bit for bit. The quartiles are of the rounds' own engine ÷ hand ratios (both measured in the
    same round): how far one run's ratio of medians can be trusted near its target."""
    from zerosim import MLP
    from zerosim.models import make_regression

    params = MLP(widths).init_params()
    batches = make_regression(np.random.default_rng(0), n, batch, widths)
    arithmetics = tuple(dict.fromkeys(("native", *arithmetics)))  # the fast hand step is checked on the native engine
    runs = contenders(widths, n, params, arithmetics, adds)
    cpu, wall = {k: [] for k in runs}, {k: [] for k in runs}
    order = random.Random(0)
    for round_ in range(repeats + 1):  # round 0 warms up (first-touch allocations, BLAS)
        names = list(runs)
        order.shuffle(names)
        for name in names:
            forget_kept_operands(drop_buffers)  # untimed: no contender finds what another measured (docstring)
            c, w = timed(lambda: runs[name].step(batches))
            if round_:
                cpu[name].append(c)
                wall[name].append(w)
        wrong = checked(runs, arithmetics, clear_trace)
        if wrong:
            raise AssertionError(f"round {round_}, {wrong}")
    spread = {}
    for a in arithmetics:
        for key, base in (((a, "hand"), ("hand", a)), ((a, "fast"), ("fast hand", "native"))):
            rounds = sorted(e / h for e, h in zip(cpu["engine", a], cpu[base]))
            spread[key] = quartiles(rounds)
    return ({k: statistics.median(v) for k, v in cpu.items()}, {k: statistics.median(v) for k, v in wall.items()},
            spread)


def compare_trees(args, arithmetics, threads) -> None:
    """--tree: a row per contender, this tree's and that tree's medians, this ÷ that (the rounds' quartiles), and
    each tree's contender ÷ its own fast hand step; then the bits."""
    print(f"ZeRO-3 step, bf16-mixed, Adam: engine (Cluster(N), defaults), oracle and the hand steps of two source "
          f"trees in turns, each tree's in a worker process of their own; median of {args.repeats}; BLAS threads "
          f"{threads}; the hand step's bf16 adds: {args.hand_adds}; the kernels' scratch buffers "
          f"{'let go' if args.drop_buffers else 'kept'} between steps; the engines' traces "
          f"{'emptied every round' if args.clear_trace else 'kept, as a run keeps them (its window folds)'}")
    print(f"load average before: {load()} (on {os.cpu_count()} cores)")
    print("CPU milliseconds per step, measured in each tree's worker; this/that: the ratio of the medians; rounds "
          "q1-q3: the quartiles of each round's own this/that; ÷ fast: each tree's contender against its own fast "
          "hand step (benchmarks/hand_zero3.py; issue 63's targets for the engine). The hand steps are this tree's "
          "code on both sides: their this/that is the two workers' difference for the same work")
    head = (f"{'MLP':<22} {'params':>9} {'N':>4} {'contender':>9} {'arithmetic':>10} {'this ms':>8} {'that ms':>8} "
            f"{'this/that':>9} {'rounds q1-q3':>12} {'÷ fast this':>11} {'that':>5}")
    trees = None
    for name in (("large", "small") if args.case == "both" else (args.case,)):
        widths, n, batch, target = CASES[name]
        cpu, seen, apart, theirs = measure_trees(widths, n, batch, args.repeats, arithmetics, args.hand_adds,
                                                 args.drop_buffers, args.tree, args.clear_trace)
        if seen != trees:
            trees = seen
            print(f"this: zerosim from {seen['this']}; that: zerosim from {seen['that']} (each asked in its worker)\n"
                  f"{head}")
        params = sum(i * o + o for i, o in zip(widths[:-1], widths[1:]))
        fast = compared(cpu, ("fast hand", "native"))
        for who, a in dict.fromkeys(k for _, k in cpu):
            mine, other, ratio, (q1, q3) = compared(cpu, (who, a))
            print(f"{str(widths):<22} {params:>9,} {n:>4} {who:>9} {a:>10} {mine * 1e3:>8.1f} {other * 1e3:>8.1f} "
                  f"{ratio:>9.3f} {q1:>6.3f}-{q3:<5.3f} {mine / fast[0]:>11.2f} {other / fast[1]:>5.2f}")
        for a, how in apart.items():
            print(f"  the engines' fp32 masters, {a}: " + (f"the two trees DIFFER ({how})" if how else
                  "the same bits in both trees after every round"))
        print("  the other tree's engine, oracle and hand steps: " + (f"DISAGREE ({theirs})" if theirs else
              "the same bits after every round, as this tree's"), flush=True)
        warning = workers_apart("fast hand", fast[2])  # benchmarks/hand_zero3.py: this tree's in both workers
        if warning:
            print("  " + warning)
    print(f"load average after: {load()}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=rounds, default=9)
    p.add_argument("--case", choices=("small", "large", "both"), default="both")
    p.add_argument("--arithmetic", choices=("native", "portable", "both"), default="both")
    p.add_argument("--hand-adds", choices=tuple(ADDS), default="ml_dtypes",
                   help="how the hand step adds its bf16 ring chunks: ml_dtypes' own add (the obvious way, the "
                        "default) or widened to float32 as the engine adds them (the same bits)")
    p.add_argument("--drop-buffers", action="store_true",
                   help="also let go of the portable kernels' scratch buffers before every contender's step, as "
                        "this script did until 2026-11-26 (fresh pages each step: `forget_kept_operands`)")
    p.add_argument("--clear-trace", action="store_true",
                   help="empty the engines' traces after every round, as this script did until 2026-11-26: the "
                        "engine then never folds its window (at 10k / N = 64 ~13 %% faster than a user's run)")
    p.add_argument("--tree", type=source_tree, help="another source tree (e.g. a checkout of the commit before a "
                   "change): its contenders in the same rounds, in turns, each tree's in a worker process of its own")
    args = p.parse_args()
    arithmetics = ("native", "portable") if args.arithmetic == "both" else (args.arithmetic,)
    threads = {v: os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if args.tree is not None:
        return compare_trees(args, arithmetics, threads)
    print(f"ZeRO-3 step, bf16-mixed, Adam: engine (Cluster(N), defaults) and oracle ÷ a hand-written NumPy step doing "
          f"the same arithmetic; median of {args.repeats} in turns; BLAS threads {threads}; the hand step's bf16 adds: "
          f"{args.hand_adds}; the kernels' scratch buffers {'let go' if args.drop_buffers else 'kept'} between steps; "
          f"the engines' traces {'emptied every round' if args.clear_trace else 'kept, as a run keeps them'}")
    print(f"load average before: {load()} (on {os.cpu_count()} cores); zerosim from {measured_tree()}")
    print("CPU milliseconds per step (the process's own time); rounds q1-q3: the quartiles of each round's own "
          "engine/hand; wall e/h: the wall-clock ratio; fast ms: benchmarks/hand_zero3.py's native step; e/fast: "
          "the engine against it, with its rounds' quartiles (issue 63's targets)")
    print(f"{'MLP':<22} {'params':>9} {'N':>4} {'arithmetic':>10} {'hand ms':>8} {'engine ms':>10} {'engine/hand':>11} "
          f"{'rounds q1-q3':>12} {'target':>7} {'oracle ms':>10} {'oracle/hand':>11} {'wall e/h':>8} "
          f"{'fast ms':>8} {'e/fast':>7} {'rounds q1-q3':>12}")
    for name in (("large", "small") if args.case == "both" else (args.case,)):
        widths, n, batch, target = CASES[name]
        t, w, spread = measure(widths, n, batch, args.repeats, arithmetics, args.hand_adds, args.drop_buffers,
                               args.clear_trace)
        params = sum(i * o + o for i, o in zip(widths[:-1], widths[1:]))
        fast = t["fast hand", "native"]
        for a in dict.fromkeys(("native", *arithmetics)):
            hand, engine, oracle = t["hand", a], t["engine", a], t["oracle", a]
            (q1, q3), (f1, f3) = spread[a, "hand"], spread[a, "fast"]
            print(f"{str(widths):<22} {params:>9,} {n:>4} {a:>10} {hand * 1e3:>8.1f} {engine * 1e3:>10.1f} "
                  f"{engine / hand:>11.2f} {q1:>7.2f}-{q3:<4.2f} {'<= ' + str(target):>7} "
                  f"{oracle * 1e3:>10.1f} {oracle / hand:>11.2f} {w['engine', a] / w['hand', a]:>8.2f} "
                  f"{fast * 1e3:>8.1f} {engine / fast:>7.2f} {f1:>7.2f}-{f3:<4.2f}")
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
