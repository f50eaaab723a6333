"""How much memory the simulator really uses, against what its ledgers say the ranks hold.

Each case runs in a fresh Python process: build an MLP of ~P parameters, a `Cluster(N)` and a `ZeroEngine`,
take one step. The yardstick is the ledgers' peak *total over all ranks at one moment* — every buffer every
rank holds, summed, at the worst instant of init + step, replayed from the trace's ordered LedgerEvents
(not the sum of each rank's own peak, which would flatter the ratio). The measure is the process's peak RSS
during init + step minus its RSS just before the cluster was made (imports, the model and the data already
there). Two things would flatter it, and are undone first: memory the setup freed but the C heap kept (the
cluster would reuse it unseen: `malloc_trim(0)` hands it back), and an earlier peak (Linux's high-water
mark is reset through /proc/self/clear_refs, so the peak is the step's own). Linux with glibc only.

    python benchmarks/memory.py [--quick]

Target (issue 14): peak RSS ÷ ledgers' peak total ≤ 1.5 at every stage, for 1M and 10M params, N = 8 and 64.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads

import argparse
import json
import subprocess
import sys

TARGET = 1.5
# 4 square layers: 4·(512² + 512) = 1,050,624; 4·(1600² + 1600) = 10,246,400
MODELS = {"1M": [512] * 5, "10M": [1600] * 5}


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """The high-water mark of RSS since the last `start_measuring` (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    raise RuntimeError("no VmHWM in /proc/self/status")


def start_measuring() -> int:
    """Give the heap's free memory back to the OS, reset the RSS high-water mark, and return the RSS now."""
    import ctypes

    ctypes.CDLL("libc.so.6").malloc_trim(0)  # else the setup's freed memory is reused by the cluster, unseen
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    return rss_bytes()


def one_case(widths, ranks, stage) -> dict:
    """Runs in the child process."""
    import numpy as np

    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.cluster import LedgerEvent
    from zerosim.models import make_regression

    model = MLP(widths)
    data = make_regression(np.random.default_rng(0), ranks, 8, widths)
    before = start_measuring()
    cluster = Cluster(ranks, trace="call")
    engine = ZeroEngine(model, cluster, stage, Adam(lr=1e-3), "bf16-mixed")
    engine.step(data)
    peak_rss = peak_rss_bytes()
    total = top = 0
    for ev in cluster.trace.log:  # every rank's allocations and frees, in the order they happened
        if type(ev) is LedgerEvent:
            total += ev.nbytes if ev.action == "alloc" else -ev.nbytes
            top = max(top, total)
    return {"params": model.num_params, "ranks": ranks, "stage": stage, "rss": peak_rss - before, "ledgers": top,
            "before": before}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1M params only")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        name, ranks, stage = args.child.split(",")
        print(json.dumps(one_case(MODELS[name], int(ranks), int(stage))))
        return
    print(f"peak RSS of one step (init + step) minus RSS before the cluster, ÷ the ledgers' peak total over all ranks; "
          f"bf16-mixed, Adam, batch 8 per rank; BLAS threads {os.environ['OPENBLAS_NUM_THREADS']}; a fresh process per "
          "case")
    print(f"{'model':>6s} {'N':>4s} {'stage':>5s} {'ledgers MB':>11s} {'RSS MB':>9s} {'ratio':>6s}")
    worst = 0.0
    for name in ["1M"] if args.quick else list(MODELS):
        for ranks in (8, 64):
            for stage in range(4):
                out = subprocess.run(
                    [sys.executable, __file__, "--child", f"{name},{ranks},{stage}"],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                r = json.loads(out.stdout)
                ratio = r["rss"] / r["ledgers"]
                worst = max(worst, ratio)
                print(
                    f"{name:>6s} {ranks:4d} {stage:5d} {r['ledgers'] / 1e6:11.1f} {r['rss'] / 1e6:9.1f} {ratio:6.2f}",
                    flush=True,
                )
    print(f"worst ratio {worst:.2f}: {'within' if worst <= TARGET else 'OVER'} the {TARGET} target")


if __name__ == "__main__":
    main()
