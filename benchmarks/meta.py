"""How long the meta backend takes to account one full training step at real scale.

A "step's accounting" is what `ZeroEngine` does on `Cluster(N, backend="meta")`: build the ranks'
buffers (init) and run one step (forward/backward layer by layer, reductions, optimizer bookkeeping,
refresh), filling the ledgers and the trace — here with the meta backend's default, one representative
rank standing for all N with the ring's bytes in closed form, so the work grows with the layers, not N.
`--hosted all` hosts every rank instead (O(N · layers), the yardstick the representative is tested against).

    python benchmarks/meta.py [--repeats 3] [--unit block|module] [--hosted all]

Wall and CPU time per case, median of --repeats. Targets (issue 14): GPT-3 175B stage 3 on 1024 ranks
< 1 s and on 4096 ranks < 2 s; the ZeRO paper's 7.5B on 64 ranks, all four stages together, < 0.2 s.
"""

import argparse
import statistics
import time

from zerosim import Adam, Cluster, ZeroEngine
from zerosim.costs import GB, get_preset, model_state_memory
from zerosim.models.meta import MetaModel

CASES = [  # (preset, ranks, stages, target seconds for the stages together)
    ("zero-paper-7.5b", 64, (0, 1, 2, 3), 0.2),
    ("gpt3-175b", 1024, (3,), 1.0),
    ("gpt3-175b", 4096, (3,), 2.0),
]


def account(model, ranks, stage, hosted):
    cluster = Cluster(ranks, backend="meta", hosted=hosted, trace="call", timeline=False)
    engine = ZeroEngine(model, cluster, stage, Adam(), "fp16-mixed")
    engine.step(model.batches(engine.cluster))
    return cluster


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--unit", choices=("block", "module"), default="block")
    p.add_argument("--hosted", choices=("representative", "all"), default="representative")
    args = p.parse_args()
    print(f"meta backend, one step (init + step), Adam, fp16-mixed, unit={args.unit}, hosted={args.hosted}; "
          f"median of {args.repeats} (wall and CPU seconds)")
    head = f"{'model':16s} {'Ψ':>10s} {'units':>5s} {'N':>5s} {'stage':>5s} {'calls':>6s} {'GB/rank':>8s} {'formula':>8s} {'wall':>7s} {'cpu':>7s}"
    print(head)
    print("-" * len(head))
    for name, ranks, stages, target in CASES:
        model = MetaModel.from_preset(get_preset(name), unit=args.unit)
        wall_total = cpu_total = 0.0
        for stage in stages:
            walls, cpus = [], []
            for _ in range(args.repeats):
                w0, c0 = time.perf_counter(), time.process_time()
                cluster = account(model, ranks, stage, args.hosted)
                walls.append(time.perf_counter() - w0)
                cpus.append(time.process_time() - c0)
            led = cluster.ranks[-1].ledger
            resting = sum(v for k, v in led.by_kind().items() if k in ("params", "grads", "master") or k.startswith("optim:"))
            formula = model_state_memory(model.num_params, ranks, stage).total
            wall, cpu = statistics.median(walls), statistics.median(cpus)
            wall_total, cpu_total = wall_total + wall, cpu_total + cpu
            print(f"{name:16s} {model.num_params / 1e9:9.2f}B {len(model.layers):5d} {ranks:5d} {stage:5d} "
                  f"{len(cluster.trace.calls):6d} {resting / GB:8.3f} {formula / GB:8.3f} {wall:7.3f} {cpu:7.3f}")
        verdict = "under" if max(wall_total, cpu_total) < target else "OVER"
        print(f"{'':16s} {name} on {ranks} ranks, stages {','.join(map(str, stages))}: wall {wall_total:.3f} s, "
              f"cpu {cpu_total:.3f} s ({verdict} the {target:g} s target)")


if __name__ == "__main__":
    main()
