"""How long the meta backend takes to account one full training step at real scale.

A "step's accounting" is what `ZeroEngine` does on `Cluster(N, backend="meta")`: build the ranks'
buffers (init) and run one step (forward/backward layer by layer, reductions, optimizer bookkeeping,
refresh), filling the ledgers and the trace — here with the meta backend's default, one representative
rank standing for all N with the ring's bytes in closed form, so the work grows with the layers, not N.
`--hosted all` hosts every rank instead (O(N · layers), the yardstick the representative is tested against).

    python benchmarks/meta.py [--repeats 3] [--unit block|module] [--hosted all] [--all-up-to 1024]

Wall and CPU time per case, median of --repeats. Targets (issue 14): GPT-3 175B stage 3 on 1024 ranks
< 1 s and on 4096 ranks < 2 s; the ZeRO paper's 7.5B on 64 ranks, all four stages together, < 0.2 s.

Then a sweep over N (GPT-3 175B, stage 3): the representative rank against hosting every rank, in turns
(representative, all, representative, ...), median of --repeats each, with the ratio; hosting every rank is
measured up to --all-up-to ranks (it takes seconds per step there). Both must agree on every rank's bytes
sent and on the ledger's peak (the script checks; tests/test_meta_backend.py checks every event).
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from zerosim import Adam, Cluster, ZeroEngine  # noqa: E402
from zerosim.analysis.costs import GB, get_preset, model_state_memory  # noqa: E402
from zerosim.models.meta import MetaModel

CASES = [  # (preset, ranks, stages, target seconds for the stages together)
    ("zero-paper-7.5b", 64, (0, 1, 2, 3), 0.2),
    ("gpt3-175b", 1024, (3,), 1.0),
    ("gpt3-175b", 4096, (3,), 2.0),
]


SWEEP = (8, 64, 256, 1024, 4096)  # ranks for GPT-3 175B, stage 3


def timed(fn) -> tuple:
    """(result, wall seconds, CPU seconds) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


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
    p.add_argument("--all-up-to", type=int, default=1024, help="largest N of the sweep at which every rank is hosted "
                                                               "too")
    args = p.parse_args()
    threads = {v: os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    print(f"meta backend, one step (init + step), Adam, fp16-mixed, unit={args.unit}, hosted={args.hosted}; "
          f"median of {args.repeats} (wall and CPU seconds); BLAS threads {threads}")
    head = (f"{'model':16s} {'Ψ':>10s} {'units':>5s} {'N':>5s} {'stage':>5s} {'calls':>6s} {'GB/rank':>8s} "
            f"{'formula':>8s} {'wall':>7s} {'cpu':>7s}")
    print(head)
    print("-" * len(head))
    for name, ranks, stages, target in CASES:
        model = MetaModel.from_preset(get_preset(name), unit=args.unit)
        wall_total = cpu_total = 0.0
        for stage in stages:
            runs = [timed(lambda: account(model, ranks, stage, args.hosted)) for _ in range(args.repeats)]
            cluster = runs[-1][0]
            led = cluster.ranks[-1].ledger
            resting = sum(
                v for k, v in led.by_kind().items() if k in ("params", "grads", "master") or k.startswith("optim:")
            )
            formula = model_state_memory(model.num_params, ranks, stage).total
            wall, cpu = statistics.median(r[1] for r in runs), statistics.median(r[2] for r in runs)
            wall_total, cpu_total = wall_total + wall, cpu_total + cpu
            print(f"{name:16s} {model.num_params / 1e9:9.2f}B {len(model.layers):5d} {ranks:5d} {stage:5d} "
                  f"{len(cluster.trace.calls):6d} {resting / GB:8.3f} {formula / GB:8.3f} {wall:7.3f} {cpu:7.3f}")
        verdict = "under" if max(wall_total, cpu_total) < target else "OVER"
        print(f"{'':16s} {name} on {ranks} ranks, stages {','.join(map(str, stages))}: wall {wall_total:.3f} s, "
              f"cpu {cpu_total:.3f} s ({verdict} the {target:g} s target)")
    sweep(args)


def sweep(args) -> None:
    """GPT-3 175B, stage 3, over N: the representative rank, and every rank hosted (up to --all-up-to), in turns."""
    model = MetaModel.from_preset(get_preset("gpt3-175b"), unit=args.unit)
    print("\nsweep over N: gpt3-175b stage 3, one representative rank ÷ every rank hosted, in turns, median of "
          f"{args.repeats}")
    head = f"{'N':>5s} {'repr wall':>10s} {'repr cpu':>9s} {'all wall':>9s} {'all cpu':>8s} {'all ÷ repr':>10s}"
    print(head)
    print("-" * len(head))
    for ranks in SWEEP:
        both = ranks <= args.all_up_to
        rep, every = [], []
        for _ in range(args.repeats):  # in turns
            rep.append(timed(lambda: account(model, ranks, 3, "representative")))
            if both:
                every.append(timed(lambda: account(model, ranks, 3, "all")))
        rw, rc = statistics.median(r[1] for r in rep), statistics.median(r[2] for r in rep)
        if not both:
            print(f"{ranks:5d} {rw:10.3f} {rc:9.3f} {'—':>9s} {'—':>8s} {'—':>10s}")
            continue
        lone, all_ranks = rep[-1][0], every[-1][0]  # the same accounting, or the ratio means nothing
        assert lone.trace.sent_totals(ranks) == all_ranks.trace.sent_totals(ranks)
        assert all(r.ledger.peak() == lone.ranks[0].ledger.peak() for r in all_ranks.ranks)
        aw, ac = statistics.median(r[1] for r in every), statistics.median(r[2] for r in every)
        print(f"{ranks:5d} {rw:10.3f} {rc:9.3f} {aw:9.3f} {ac:8.3f} {aw / rw:10.1f}")


if __name__ == "__main__":
    main()
