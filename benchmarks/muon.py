"""What a Muon step costs beside an Adam step: the same ZeRO-3 engine, the same model and batch, in turns (issue 63,
Must show 5a: Muon step ÷ Adam step <= 2 at 919k parameters on 4 ranks).

Compared: `ZeroEngine(MLP, Cluster(N), 3, MuonAdamW())` against `ZeroEngine(MLP, Cluster(N), 3, Adam(lr=1e-3))`,
everything else the defaults (precision "fp16-mixed", Muon's `sharding="gather"`, Newton-Schulz in the fp32 masters'
format with the portable products, 5 quintic iterations), the model and rows per rank of benchmarks/peers.py and
portable_step.py (919k: MLP [256, 1024, 512, 256], 32 rows per rank), the same initial parameters and batches. Each
round steps both engines once in a new seeded order; CPU time of this process (BLAS pinned to one thread), medians
of --repeats after a warm-up round, and the quartiles of the rounds' own Muon ÷ Adam. Both engines' losses are
checked finite. The two optimizers give different bits: there is nothing to compare but time.

Where the time goes, measured in the same rounds on matrices of the step's own shapes (MuonAdamW's: the three
hidden weights), random normal ones drawn anew each round (NS's cost depends on the values only through the few
elements its products leave in doubt; "ns portable" came within a few per cent of the Muon step's extra time over
Adam's in the runs of benchmarks/README.md): `newton_schulz` as the engine runs it (each product exact, rounded
once: precision/arithmetic/ `exact_matmul` and `exact_gram`), and the same iteration on float64 copies
(`newton_schulz`'s fp64 yardstick: NumPy's dgemm, syrk for the two Gram products, as the portable path forms them).
An fp32 product rounded once and the same on every machine needs at least that float64 product of the widened
operands (the products of two fp32 are exact in float64; a float32 GEMM's sums round after every add), so "floor" =
the Muon step with its NS replaced by the float64 one's time: what Muon ÷ Adam would be if every check and settling
of the exact products cost nothing.

    python benchmarks/muon.py [--repeats 9] [--cases 919k:4] [--shardings gather,owner]
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
from peers import BATCH, MODELS, measured_tree  # noqa: E402  (the models and rows per rank issue 63 measures everywhere)

TARGET = 2.0  # issue 63, Must show 5


def engines(widths, n: int, shardings) -> dict:
    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.optim import MuonAdamW

    model = MLP(widths)
    params = model.init_params()
    runs = {"adam": ZeroEngine(model, Cluster(n), 3, Adam(lr=1e-3), params=params)}
    for how in shardings:
        runs[f"muon {how}"] = ZeroEngine(model, Cluster(n), 3, MuonAdamW(sharding=how), params=params)
    return runs


def _quartiles(values) -> tuple:
    values = sorted(values)
    return tuple(statistics.quantiles(values, n=4)[::2]) if len(values) > 1 else (values[0], values[0])


def measure(widths, n: int, shardings, repeats: int) -> tuple:
    """({contender: median CPU s}, {contender: rounds' quartiles of its ratio to Adam}); contenders: the engines
    and "ns portable" / "ns float64" (the Muon step's Newton-Schulz of its matrices, alone)."""
    from zerosim.models import make_regression
    from zerosim.optim import newton_schulz
    from zerosim.parallel.data.muon import muon_matrices

    batches = make_regression(np.random.default_rng(0), n, BATCH, widths)
    runs, order, rng = engines(widths, n, shardings), random.Random(0), np.random.default_rng(1)
    muon = next(e for name, e in runs.items() if name != "adam")
    shapes = [m.shape for m in muon_matrices(muon.optimizer, muon.model.specs, muon.layout)]
    ns = {"ns portable": lambda us: [newton_schulz(u) for u in us],
          "ns float64": lambda us: [newton_schulz(u.astype(np.float64)) for u in us]}
    cpu = {name: [] for name in [*runs, *ns]}
    for round_ in range(repeats + 1):  # round 0 warms up
        us = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        names = list(cpu)
        order.shuffle(names)
        for name in names:
            c = time.process_time()
            if name in ns:
                ns[name](us)
            else:
                losses = runs[name].step(batches)
            if round_:
                cpu[name].append(time.process_time() - c)
            if name in runs:
                runs[name].cluster.trace.clear()  # a benchmark of many steps keeps no log from step to step
                if not all(math.isfinite(x) for x in losses):
                    raise FloatingPointError(f"{name}: a loss is not finite")
    ratios = {name: [p / q for p, q in zip(v, cpu["adam"])] for name, v in cpu.items() if name != "adam"}
    for how in shardings:  # the step with its Newton-Schulz at the float64 GEMMs' cost
        ratios[f"floor {how}"] = [(m - p + f) / a for m, p, f, a in
                                  zip(cpu[f"muon {how}"], cpu["ns portable"], cpu["ns float64"], cpu["adam"])]
    return ({name: statistics.median(v) for name, v in cpu.items()},
            {name: (statistics.median(v), *_quartiles(v)) for name, v in ratios.items()})


def main():
    from zerosim import MLP

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--cases", default="919k:4", help="MODEL:N,... (MODEL: 919k or 10M)")
    p.add_argument("--shardings", default="gather", help="Muon shardings to time (gather is the default)")
    args = p.parse_args()
    shardings = args.shardings.split(",")
    print(f"ZeRO-3, precision fp16-mixed (the default), MuonAdamW() vs Adam(lr=1e-3); CPU ms, median of "
          f"{args.repeats} in turns; BLAS threads {os.environ['OPENBLAS_NUM_THREADS']}; load average before "
          f"{os.getloadavg()[0]:.2f}; zerosim from {measured_tree()}")
    for case in args.cases.split(","):
        name, n = case.split(":")
        widths = MODELS[name]
        t, r = measure(widths, int(n), shardings, args.repeats)
        print(f"\nMLP {widths}, {MLP(widths).num_params:,} params, N = {n}")
        print(f"{'contender':<16} {'CPU ms':>8} {'÷ Adam step':>11} {'rounds q1-q3':>13}")
        print(f"{'adam':<16} {t['adam'] * 1e3:>8.1f} {1:>11.2f}")
        for key in [*(f"muon {h}" for h in shardings), "ns portable", "ns float64", *(f"floor {h}" for h in shardings)]:
            ms = f"{t[key] * 1e3:>8.1f}" if key in t else f"{'':>8}"
            median, q1, q3 = r[key]
            print(f"{key:<16} {ms} {median:>11.2f} {q1:>8.2f}-{q3:<4.2f}")
        print(f"target: muon gather ÷ Adam <= {TARGET}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
