"""How long the meta backend takes to account one full training step at real scale.

A "step's accounting" is what `ZeroEngine` does on `Cluster(N, backend="meta", trace="call")`: build
every rank's buffers (init) and run one step (forward/backward with per-layer hooks, reductions,
optimizer bookkeeping, refresh), filling every rank's ledger and one trace event per rank per
collective. Goal: each case under 10 s. Measured in one run, wall clock, best of --repeats.

    python benchmarks/meta.py [--repeats 1] [--unit block|module] [--no-timeline]

Units: "block" gathers one transformer block at a time (FSDP-style wrapping: GPT-3 is 99 units);
"module" one module (DeepSpeed-style: 579 units, ~6x the collectives and hook calls).
"""

import argparse
import time

from zerosim import Adam, Cluster, ZeroEngine
from zerosim.costs import GB, get_preset, model_state_memory
from zerosim.models.meta import MetaModel

CASES = [  # (preset, ranks, stages)
    ("zero-paper-7.5b", 64, (0, 1, 2, 3)),
    ("gpt3-175b", 1024, (3,)),
]
GOAL = 10.0  # seconds per case (the target)


def account(model, ranks, stage, timeline):
    cluster = Cluster(ranks, backend="meta", trace="call", timeline=timeline)
    engine = ZeroEngine(model, cluster, stage, Adam(), "fp16-mixed")
    engine.step(model.batches(ranks))
    return cluster


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--unit", choices=("block", "module"), default="block")
    p.add_argument("--no-timeline", dest="timeline", action="store_false", help="keep only current and peak bytes, not every alloc/free")
    args = p.parse_args()
    print(f"meta backend, one step (init + step), Adam, fp16-mixed, trace='call', unit={args.unit}, "
          f"timeline={'on' if args.timeline else 'off'}; best of {args.repeats}")
    head = f"{'model':16s} {'Ψ':>10s} {'units':>5s} {'N':>5s} {'stage':>5s} {'calls':>6s} {'events':>8s} " \
           f"{'GB/rank':>8s} {'formula':>8s} {'seconds':>8s}"
    print(head)
    print("-" * len(head))
    for name, ranks, stages in CASES:
        model = MetaModel.from_preset(get_preset(name), unit=args.unit)
        case_time = 0.0
        for stage in stages:
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                cluster = account(model, ranks, stage, args.timeline)
                times.append(time.perf_counter() - t0)
            led = cluster.ranks[-1].ledger
            resting = sum(v for k, v in led.by_kind().items() if k in ("params", "grads", "master") or k.startswith("optim:"))
            formula = model_state_memory(model.num_params, ranks, stage).total
            case_time += min(times)
            print(f"{name:16s} {model.num_params / 1e9:9.2f}B {len(model.layers):5d} {ranks:5d} {stage:5d} "
                  f"{len(cluster.trace.calls):6d} {len(cluster.trace.events):8d} {resting / GB:8.3f} {formula / GB:8.3f} {min(times):8.2f}")
        verdict = "under" if case_time < GOAL else "OVER"
        print(f"{'':16s} {name} on {ranks} ranks, stages {','.join(map(str, stages))}: {case_time:.2f} s ({verdict} the {GOAL:g} s goal)")


if __name__ == "__main__":
    main()
