"""The portable kernel's price on one ZeRO-3 step's products: exact_matmul ÷ the hand step's float64 GEMM, in turns.

benchmarks/yardstick.py times whole steps, whose run-to-run spread (a few per cent) hides a millisecond. This takes
one step's matrix products out of the step: it runs the yardstick's engine (bf16-mixed, the portable arithmetic)
for a few steps, captures the operands of every product of the next one (72 at 919k parameters on N = 8, 576 at
10k on N = 64), and then runs all of them again, in turns, three ways:

    exact    zerosim's exact_matmul, in the step's order (its operand cache sees the ranks' copies of each weight
             as the engine does): every element the exact dot product rounded once to fp32, proved
    hand     the yardstick's portable hand product, (a64 @ b64).astype(f32): one float64 GEMM rounded, no proof; a
             batch of products with one each (the ranks' dW, one call since the kernel proves them together) GEMM
             by GEMM into one fp32 array, its fastest way here (the batch's whole float64 product at once: 48 ms a
             step's products against 40, in turns, 2-core AMD EPYC at load 5.6)
    native   the machine's sgemm on the fp32-widened operands (other bits: for scale)

The exact and hand products are checked equal bit for bit every round (the proof's own answer, and the hand step's
assumption that these float64 sums are exact). `exact - hand` is what the proof costs per step.

--case gpt takes instead the products of one step of notebook 11's copy-task GPT (`zerosim train --model gpt`:
vocabulary 6, width 16, 3,600 parameters) at ZeRO-2 on 2 ranks in --precision (fp32 by default): a learner's
products, a few hundred to 16,384 elements each, whose cost is the kernel's Python, not its arithmetic. fp32 sums in
float64 are not always exact, so there the elements where exact and hand differ are counted, not refused.

    python benchmarks/products.py [--case large|small|gpt] [--precision fp32] [--rounds 30]
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from yardstick import CASES, load, policy  # noqa: E402


def hand(a, b):
    """The yardstick's portable hand product: one float64 GEMM rounded to fp32, no proof. A batch of products with one
    each (the ranks' dW, (n, M, K) @ (n, K, N)) GEMM by GEMM, each rounded into its block as it is made: the whole
    batch's float64 product at once is fresh memory every call (32 MB at 919k on 8 ranks), slower than the loop."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0]:
        return (a64 @ b64).astype(np.float32)
    out = np.empty((a.shape[0], a.shape[1], b.shape[2]), np.float32)
    for p in range(a.shape[0]):
        out[p] = a64[p] @ b64[p]  # rounded to fp32 as it is stored
    return out


def native(a, b):
    """The machine's sgemm on the fp32-widened operands."""
    return a.astype(np.float32) @ b.astype(np.float32)


def captured_products(case: str, precision: str = "fp32") -> list:
    """[(a, b)] of every product one engine step makes, after two steps that warm it up; copies in the operands'
    own memory order (a weight's transposed view stays a transposed view)."""
    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.models import GPT, make_regression, make_sequence_task
    from zerosim.precision.arithmetic import _kernels

    if case == "gpt":  # notebook 11's: `zerosim train --model gpt --task copy`, 16 strings of 3 a micro-batch
        model = GPT(6, 16, 2, 1, 6)
        data = make_sequence_task(np.random.default_rng(0), 400, 16, 3, 6, "copy")
        batches = data[:2]
        engine = ZeroEngine(model, Cluster(2), 2, Adam(lr=1e-2), precision,
                            params=model.init_params(np.random.default_rng(1)))
    else:
        widths, n, batch, _ = CASES[case]
        model = MLP(widths)
        batches = make_regression(np.random.default_rng(0), n, batch, widths)
        engine = ZeroEngine(model, Cluster(n), 3, Adam(lr=1e-3), policy("portable"), params=model.init_params())
    for _ in range(2):
        engine.step(batches)
    portable, seen = _kernels.ARITHMETICS["portable"], []

    def spy(a, b, **out):  # out=: an fp32 backward writes the ranks' dW into their packed gradients
        seen.append((a.copy(order="K"), b.copy(order="K")))
        return portable.matmul(a, b, **out)

    _kernels.ARITHMETICS["portable"] = dataclasses.replace(portable, matmul=spy)
    try:
        engine.step(batches)
    finally:
        _kernels.ARITHMETICS["portable"] = portable
    return seen


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=tuple(CASES) + ("gpt",), default="large")
    p.add_argument("--precision", default="fp32", help="the gpt case's precision (default fp32)")
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args()
    from zerosim.precision.arithmetic import exact_matmul

    ways = {"exact": exact_matmul, "hand": hand, "native": native}
    products = captured_products(args.case, args.precision)
    what = (f"ZeRO-2 step of notebook 11's GPT on 2 ranks, {args.precision}" if args.case == "gpt" else
            f"ZeRO-3 step ({args.case} case of benchmarks/yardstick.py)")
    print(f"{len(products)} products of one {what}, {args.rounds} rounds in turns; load average before: {load()}")
    apart = 0
    cpu = {way: [] for way in ways}
    for k in range(args.rounds + 1):  # round 0 warms up
        order = list(ways) if k % 2 else list(reversed(ways))
        outs = {}
        for way in order:
            start = time.process_time()
            outs[way] = [ways[way](a, b) for a, b in products]
            if k:
                cpu[way].append(time.process_time() - start)
        differ = sum(int(np.count_nonzero(x.view(np.uint32) != y.view(np.uint32)))
                     for x, y in zip(outs["exact"], outs["hand"]))
        if differ and args.case != "gpt":
            raise AssertionError("exact_matmul and the float64 GEMM rounded once disagree on these products")
        apart = max(apart, differ)
    ms = {way: statistics.median(v) * 1e3 for way, v in cpu.items()}
    print(f"CPU ms per step's products (median): exact {ms['exact']:.2f}, hand {ms['hand']:.2f}, native "
          f"{ms['native']:.2f}; exact ÷ hand {ms['exact'] / ms['hand']:.2f}, the proof {ms['exact'] - ms['hand']:+.2f} "
          f"ms a step")
    if args.case == "gpt":
        print(f"elements where the float64 GEMM rounded once is not the exact sum rounded: {apart}")
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
