"""What the portable arithmetic (the default) costs a training step: the same ZeRO-3 engine under "portable" and
"native" products, in turns (issue 63, Must show 1).

`ZeroEngine(MLP, Cluster(N), 3, Adam(lr=1e-3), precision)` with the precision's default arithmetic ("portable": each
product's exact dot products rounded once to fp32, the same bits on every machine; zerosim/precision/arithmetic/)
against the same engine with `arithmetic="native"` (the machine's sgemm on the fp32-widened operands), for bf16-mixed
and fp32, at 919k parameters on 8 ranks and 10M on 4. Each round steps every contender once in a new seeded order;
CPU time of this process (BLAS pinned to one thread), median of --repeats after a warm-up round, and the quartiles
of the rounds' own portable ÷ native. The two arithmetics give different bits, so there is nothing to compare but
time; each engine's losses are checked finite.

Targets (issue 63): portable ÷ native <= 1.25 for bf16-mixed at 919k, <= 1.5 for fp32 (at 919k and 10M).

    python benchmarks/portable_step.py [--repeats 9] [--cases 919k:8,10M:4] [--precisions bf16-mixed,fp32]
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/peers.py, however this file is run
from peers import BATCH, MODELS  # noqa: E402  (the models and rows per rank issue 63 measures everywhere)

TARGETS = {"bf16-mixed": 1.25, "fp32": 1.5}


def engines(widths, n: int, precision: str) -> dict:
    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.precision import get_precision

    model = MLP(widths)
    params = model.init_params()
    policy = get_precision(precision)
    return {a: ZeroEngine(model, Cluster(n), 3, Adam(lr=1e-3), policy.with_(arithmetic=a), params=params)
            for a in ("portable", "native")}


def measure(widths, n: int, precision: str, repeats: int) -> tuple:
    """({arithmetic: median CPU s}, (q1, q3) of the rounds' portable ÷ native)."""
    from zerosim.models import make_regression
    from zerosim.precision.arithmetic import clear_kept_operands

    batches = make_regression(np.random.default_rng(0), n, BATCH, widths)
    runs, order = engines(widths, n, precision), random.Random(0)
    cpu = {a: [] for a in runs}
    for round_ in range(repeats + 1):  # round 0 warms up
        names = list(runs)
        order.shuffle(names)
        for a in names:
            clear_kept_operands()  # untimed: neither finds the other's widened weights
            c = time.process_time()
            losses = runs[a].step(batches)
            if round_:
                cpu[a].append(time.process_time() - c)
            runs[a].cluster.trace.clear()  # a benchmark of many steps keeps no log from step to step
            if not all(math.isfinite(x) for x in losses):
                raise FloatingPointError(f"{a}: a loss is not finite")
    rounds = sorted(p / q for p, q in zip(cpu["portable"], cpu["native"]))
    spread = statistics.quantiles(rounds, n=4)[::2] if len(rounds) > 1 else (rounds[0], rounds[0])
    return {a: statistics.median(v) for a, v in cpu.items()}, spread


def main():
    from zerosim import MLP

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--cases", default="919k:8,10M:4", help="MODEL:N,... (MODEL: 919k or 10M)")
    p.add_argument("--precisions", default="bf16-mixed,fp32")
    args = p.parse_args()
    print(f"ZeRO-3, Adam, Cluster(N) defaults; CPU ms per step, median of {args.repeats} in turns; BLAS threads "
          f"{os.environ['OPENBLAS_NUM_THREADS']}; load average before {os.getloadavg()[0]:.2f}")
    print(f"{'MLP':<24} {'params':>10} {'N':>3} {'precision':>10} {'native ms':>10} {'portable ms':>12} "
          f"{'portable/native':>15} {'rounds q1-q3':>12} {'target':>7}")
    for case in args.cases.split(","):
        name, n = case.split(":")
        widths = MODELS[name]
        for precision in args.precisions.split(","):
            t, (q1, q3) = measure(widths, int(n), precision, args.repeats)
            params = MLP(widths).num_params
            print(f"{str(widths):<24} {params:>10,} {n:>3} {precision:>10} {t['native'] * 1e3:>10.1f} "
                  f"{t['portable'] * 1e3:>12.1f} {t['portable'] / t['native']:>15.2f} {q1:>7.2f}-{q3:<4.2f} "
                  f"{'<= ' + str(TARGETS[precision]):>7}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
