"""How long a timeline of one ZeRO step at real scale takes: record it on the meta backend, then simulate it.

The work: `ZeroEngine` runs one step of GPT-3 175B (block units) on `Cluster(1024, backend="meta")`, filling
the trace, and `zerosim.analysis.timeline._simulate` places every event in time (H100, InfiniBand NDR). The yardstick
does the same work with every rank hosted (`hosted="all"`: one Compute per rank per unit in the log, the
ring's bytes hop by hop per rank), the way the simulator worked before the representative rank; ratio =
yardstick ÷ zerosim, measured in turns, medians of --repeats.

    python benchmarks/timeline.py [--repeats 5] [--ranks 1024] [--comm seed|deepspeed|fsdp]

Target (issue 10): under 10 s for GPT-3 175B, stage 3, 1024 ranks.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads: one BLAS thread, as the tests run

import argparse
import statistics
import time

from zerosim import Adam, Cluster, ZeroEngine
from zerosim.analysis.costs import get_preset
from zerosim.analysis.timeline import Hardware, simulate
from zerosim.models.meta import MetaModel

TARGET = 10.0


def timeline_of(model, ranks, stage, comm, hosted, hw):
    """(seconds to record, seconds to simulate, the simulated step time)."""
    t0 = time.perf_counter()
    cluster = Cluster(ranks, backend="meta", hosted=hosted, trace="call", timeline=False)
    engine = ZeroEngine(model, cluster, stage, Adam(), "fp16-mixed", comm=comm)
    engine.step(model.batches(cluster, batch=2048))
    t1 = time.perf_counter()
    result = simulate(cluster.trace, hw, overlap=engine.comm.overlap_comm)
    return t1 - t0, time.perf_counter() - t1, result.step_time


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--comm", choices=("seed", "deepspeed", "fsdp"), default="seed")
    p.add_argument("--no-baseline", action="store_true", help="skip the all-ranks yardstick (slow at 4096 ranks)")
    args = p.parse_args()
    model, hw = MetaModel.from_preset(get_preset("gpt3-175b"), unit="block"), Hardware("h100", "ib_ndr", "fp16")
    print(f"GPT-3 175B in {len(model.layers)} block units, ZeRO-3, N = {args.ranks}, comm={args.comm}, H100 + "
          "InfiniBand NDR; "
          f"BLAS threads {os.environ['OPENBLAS_NUM_THREADS']}; median of {args.repeats}, in turns")
    ours, base = [], []
    for _ in range(args.repeats):
        ours.append(timeline_of(model, args.ranks, 3, args.comm, "representative", hw))
        if not args.no_baseline:
            base.append(timeline_of(model, args.ranks, 3, args.comm, "all", hw))
    for name, runs in (("zerosim (one representative rank)", ours), ("yardstick (every rank hosted)", base)):
        if runs:
            rec, sim = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            print(f"  {name:36s} record {rec:7.3f} s  simulate {sim:7.3f} s  total {rec + sim:7.3f} s  "
                  f"(simulated step {runs[0][2]:.3f} s)")
    total = statistics.median(r[0] + r[1] for r in ours)
    if base:
        steps = {round(r[2], 9) for r in ours + base}
        print(f"  same simulated step time both ways: {'yes' if len(steps) == 1 else 'NO: ' + str(sorted(steps))}")
        print(f"  ratio yardstick / zerosim: {statistics.median(r[0] + r[1] for r in base) / total:.1f}x")
    print(f"  {'under' if total < TARGET else 'OVER'} the {TARGET:g} s target ({total:.3f} s)")


if __name__ == "__main__":
    main()
