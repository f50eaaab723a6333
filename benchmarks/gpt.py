"""A GPT step on N = 4 simulated ranks ÷ the oracle's step on the same micro-batches; recompute FLOPs per strategy.

1. Time. The engine (ZeRO stage 0-3 over 4 ranks: the ring, the per-unit gathers and reduce-scatters, the
   ledgers and the trace) against the same-arithmetic oracle, `Reference(order="ring-native")`: the
   same 4 forward/backward passes through the same units, one reduction in the ring's order with NumPy's
   adds in the wire dtype (the same bits: checked), one optimizer step (benchmarks/engine.py explains the
   yardstick). Measured in one run, engine and oracle in turns (both see the same machine load), median
   of --repeats, BLAS pinned to one thread (set before numpy loads). Target: <= 1.3 (issue 9).

2. FLOPs. Seed 001: block checkpointing forward-passes each layer twice, "approximately 1/3 extra compute".
   For each strategy, the FLOPs of one step's compute events (the trace: forward, recompute, backward,
   loss), beside the step without checkpointing: the extra is the recompute (block, subblock, every-k) or
   the P rebuilt inside the attention backward (selective, flash). Counted twice: on the small GPT the
   timing runs (real data), and at seed 001's 7B shape on the meta backend (`zerosim.analysis.costs._measured.
   strategy_costs`: the same units' FLOP counts, no data).

    python benchmarks/gpt.py [--repeats 7] [--stage 3]
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from zerosim import Adam, Cluster, Reference, ZeroEngine  # noqa: E402
from zerosim.analysis.costs import strategy_costs
from zerosim.cluster import Compute  # noqa: E402
from zerosim.models import GPT, make_sequence_task  # noqa: E402
from zerosim.models.gpt import STRATEGIES, strategy_options

N = 4
SHAPE = dict(vocab=64, d_model=128, n_heads=4, n_layers=4, seq_len=64)  # 0.8M params; B = 8 sequences per rank
BATCH = 8
SEED001 = dict(vocab=50257, d_model=4096, n_heads=32, n_layers=32)  # seed 001's 7B shape; B = 4, L = 2048


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(stage, precision, repeats):
    model = GPT(**SHAPE)
    params = model.init_params()
    batches = make_sequence_task(np.random.default_rng(0), N, BATCH, SHAPE["seq_len"] // 2, SHAPE["vocab"], "copy")
    engine = ZeroEngine(model, Cluster(N, trace="call", timeline=False), stage, Adam(lr=1e-3), precision, params=params)
    native = Reference(model, Adam(lr=1e-3), precision, world_size=N, params=params, order="ring-native")
    for run in (engine, native):  # warm up (first-touch allocations, BLAS)
        run.step(batches)
    t_engine, t_native = [], []
    for _ in range(repeats):  # in turns
        t_engine.append(timed(lambda: engine.step(batches)))
        t_native.append(timed(lambda: native.step(batches)))
    assert np.array_equal(engine.full_master(), native.master())  # the same arithmetic, bit for bit
    return model.num_params, statistics.median(t_engine), statistics.median(t_native)


def step_flops(model, cluster, batches) -> dict:
    """{kind: FLOPs} of one stage-0 step's compute events on rank 0 (forward, recompute, backward, loss)."""
    engine = ZeroEngine(model, cluster, 0, Adam(), "bf16-mixed", checkpoint=model.checkpointing)
    engine.step(batches)
    out = {}
    for e in cluster.trace.log:
        if isinstance(e, Compute) and e.rank == 0:
            out[e.kind] = out.get(e.kind, 0) + e.flops
    return out


def flops_by_strategy():
    """{strategy: (the small GPT's extra, its recompute FLOPs, the 7B shape's extra, its recompute FLOPs)}."""
    rng = np.random.default_rng(1)
    small_batch = [(rng.integers(0, SHAPE["vocab"], (BATCH, SHAPE["seq_len"])),) * 2]
    small = {
        name: step_flops(GPT(**SHAPE, **strategy_options(name)), Cluster(1, trace="call", timeline=False), small_batch)
        for name in STRATEGIES
    }
    plain = sum(small["none"].values())
    big = {r["strategy"]: r for r in strategy_costs(4, 2048, **SEED001)}  # the meta backend's step
    return {name: (sum(small[name].values()) / plain - 1, small[name].get("recompute", 0),
                   big[name]["extra"], big[name]["flops"].get("recompute", 0)) for name in STRATEGIES}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--precision", default="bf16-mixed")
    p.add_argument("--stage", type=int, action="append", choices=(0, 1, 2, 3), help="stages to time (default all)")
    args = p.parse_args()
    threads = {v: os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    print(f"GPT {SHAPE}, B = {BATCH} per rank, N = {N}, {args.precision}: engine step ÷ same-arithmetic oracle step,")
    print(f"median of {args.repeats} in turns; BLAS threads {threads}")
    print(f"{'stage':>5} {'params':>9} {'engine ms':>10} {'oracle ms':>10} {'ratio':>6} {'target':>7}")
    for stage in args.stage or (0, 1, 2, 3):
        params, te, tn = measure(stage, args.precision, args.repeats)
        print(f"{stage:>5} {params:>9,} {te * 1e3:>10.1f} {tn * 1e3:>10.1f} {te / tn:>6.2f} {'<= 1.3':>7}")
    print()
    print("Extra FLOPs per step over no checkpointing (compute events; seed 001: block checkpointing ≈ 1/3):")
    print(f"{'strategy':<10} {'small GPT: recompute':>21} {'extra':>7}   {'7B shape: recompute':>21} {'extra':>7}")
    for name, (extra, recompute, extra_7b, recompute_7b) in flops_by_strategy().items():
        print(f"{name:<10} {recompute:>21.4g} {extra:>7.3f}   {recompute_7b:>21.4g} {extra_7b:>7.3f}")


if __name__ == "__main__":
    main()
