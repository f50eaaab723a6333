"""One ZeRO-3 step on N = 8 simulated ranks vs the oracle's step over the same 8 micro-batches.

Both do the same arithmetic (8 forward/backward passes, one reduction, one optimizer step over the
whole model); the engine adds the ring, the per-layer gathers, the ledgers and the trace. The ratio
is what simulating the cluster costs. Target: <= 1.5. Measured in one run, best of several.

    python benchmarks/engine.py [--repeats 5] [--widths 256,1024,512,256]
"""

import argparse
import time

import numpy as np

from zerosim import Adam, Cluster, MLP, Reference, ZeroEngine
from zerosim.models import make_regression


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--widths", default="256,1024,512,256")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--precision", default="bf16-mixed")
    args = p.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    n = args.ranks
    model = MLP(widths)
    params = model.init_params()
    batches = make_regression(np.random.default_rng(0), n, args.batch, widths)
    engine = ZeroEngine(model, Cluster(n, trace="call", timeline=False), 3, Adam(lr=1e-3), args.precision, params=params)
    oracle = Reference(model, Adam(lr=1e-3), args.precision, world_size=n, params=params)
    engine.step(batches)  # warm up both (first-touch allocations, BLAS threads)
    oracle.step(batches)
    t_engine = best(lambda: engine.step(batches), args.repeats)
    t_oracle = best(lambda: oracle.step(batches), args.repeats)
    print(f"MLP {widths}: {model.num_params:,} params, {n} ranks x batch {args.batch}, {args.precision}")
    print(f"  ZeRO-3 step (simulated cluster)   {t_engine * 1e3:8.1f} ms")
    print(f"  oracle, 8 micro-batches + update  {t_oracle * 1e3:8.1f} ms")
    print(f"  ratio engine / oracle             {t_engine / t_oracle:8.2f}   (target <= 1.5)")


if __name__ == "__main__":
    main()
