"""How the meta backend and the planner grow with ranks and with layers: CPU time and peak memory, with fitted
exponents.

Each point runs in a fresh interpreter (so its peak RSS is its own) and reports the CPU seconds of the work alone
(imports and model building outside) and the growth of its peak RSS over what the interpreter held before the work.

    meta     `zerosim memory`'s run: one ZeRO-3 step of GPT-3's data-less twin (costs.measure_stage, fp16-mixed, Adam,
             the representative rank), d_model 12,288, with L blocks (L = 96 is GPT-3 175B)
    planner  `zerosim plan`: every stage x checkpointing strategy x micro-batch for Llama-3 70B's shape with L blocks
             (80 is the model), 8 GPUs a node, H100 80GB, 4,096 tokens, 4 sequences per GPU per step

Sweeps: ranks N = 64 ... 65,536 at the model's own depth, and blocks L = 12 ... 192 at N = 1,024. The exponent is the
least-squares slope of log(CPU seconds) on log(N) or log(L): time ~ N^a, ~ L^b. Targets (issue 41, Must show 3):
b <= 1.05, a <= 0.2, and GPT-3 175B on 65,536 ranks < 1 s.

    python benchmarks/scaling.py [--what meta,planner] [--repeats 3]

CPU time per point is the median of --repeats fresh runs; the load average is printed before and after. The
planner's points also say how many configurations it measured (its rows and the stages it pruned: one meta micro-step
each, and two more for each row that fits, to time it) and the CPU per configuration: what a configuration costs and
how many there are move apart (the checkpointing strategies went from 6 to 10, doubling the rows).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys

RANKS = (64, 256, 1024, 4096, 16384, 65536)
BLOCKS = (12, 24, 48, 96, 192)
DEPTH = {"meta": ("gpt3-175b", 96), "planner": ("llama-3-70b", 80)}

POINT = r"""
import dataclasses, json, resource, sys, time
from zerosim.models.hf import read_hf_config, shipped_config

what, name, n, layers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
config = dataclasses.replace(read_hf_config(shipped_config(name)), n_layers=layers)
if what == "meta":
    from zerosim.analysis.costs import measure_stage
    from zerosim.models.gpt import MetaGPT

    model = MetaGPT.from_config(config)
    work = lambda: measure_stage(model, n, 3)
else:
    from zerosim.analysis.planner import plan

    work = lambda: plan(config, n, 8, "h100-80gb", 4096, 4 * n)
import zerosim.parallel.data  # noqa: F401  (what the work imports, loaded before the clock starts)

def rss_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

before = rss_kb()
c0 = time.process_time()
done = work()
cpu = time.process_time() - c0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB
# the planner's configurations: one meta micro-step each (a row, or a stage pruned by its model states)
tried = len(done.rows) + len(done.pruned) + len(done.pruned_offload) if what == "planner" else 1
print(json.dumps({"cpu": cpu, "rss_mb": max(peak - before, 0) / 1024, "tried": tried}))
"""


def point(what: str, n: int, layers: int) -> dict:
    name = DEPTH[what][0]
    out = subprocess.run([sys.executable, "-c", POINT, what, name, str(n), str(layers)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def slope(xs, ys) -> float:
    """Least-squares slope of log y on log x."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.mean(lx), statistics.mean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def sweep(what: str, axis: str, repeats: int) -> None:
    name, depth = DEPTH[what]
    values = RANKS if axis == "ranks" else BLOCKS
    rows = []
    for v in values:
        n, layers = (v, depth) if axis == "ranks" else (1024, v)
        runs = [point(what, n, layers) for _ in range(repeats)]
        rows.append((v, statistics.median(r["cpu"] for r in runs), max(r["rss_mb"] for r in runs)))
        tried = runs[0]["tried"]
        each = f"   {tried} configurations, {rows[-1][1] / tried * 1e3:5.0f} ms each" if what == "planner" else ""
        print(f"  {what:7s} {name:12s} N={n:>6,} L={layers:>4}   CPU {rows[-1][1]:7.3f} s   "
              f"peak RSS +{rows[-1][2]:6.1f} MB{each}", flush=True)
    a = slope([r[0] for r in rows], [r[1] for r in rows])
    target = 0.2 if axis == "ranks" else 1.05
    print(f"  {what} time ~ {'N' if axis == 'ranks' else 'L'}^{a:.2f} (target <= {target}); peak RSS from "
          f"{rows[0][2]:.1f} to {rows[-1][2]:.1f} MB\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--what", default="meta,planner")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (on {os.cpu_count()} cores); "
          f"CPU seconds, median of {args.repeats} fresh runs per point")
    for what in args.what.split(","):
        for axis in ("ranks", "layers"):
            sweep(what, axis, args.repeats)
    r = point("meta", 65536, 96)
    print(f"GPT-3 175B, ZeRO-3, 65,536 ranks (the meta step `zerosim memory` runs): {r['cpu']:.3f} s CPU "
          "(target < 1 s)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
