"""Every rank's op as one computation (the default with one worker) against the loop over ranks, in turns.

With one worker, an op whose layer treats rows apart runs once for every rank, their micro-batches stacked row by
row (models/_stacked.py; docs/speed.md, section 1, item 13); `Cluster(N, stack_ranks=False)` runs each rank's
`Pass.run` by itself, the naive twin. The yardstick here is that loop: the same engine, the same arithmetic, the
same events, one rank at a time. Rows: ZeRO-3, bf16-mixed, Adam, on the portable kernels (the default; native
arithmetic never stacks), on benchmarks/yardstick.py's two MLPs (919k parameters on N = 8, 10k on N = 64), with and
without activation checkpointing (whose checkpointed forwards and recomputes stack since issue 41's thirteenth
stop).

Each round steps both engines once on the same micro-batches, in a new seeded order, the portable kernels' memo
of operands emptied before each (untimed, as the yardstick does); after each round their losses and fp32 masters
are compared bit for bit. CPU time of this process, BLAS pinned to one thread; the ratio is the median of the
rounds' own stacked ÷ loop, with its quartiles. The load average before and after.

    python benchmarks/stacked.py [--repeats 15] [--case small|large|both]
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402

import numpy as np  # noqa: E402
from yardstick import CASES, forget_kept_operands, load, policy, timed  # noqa: E402


def measure(widths, n: int, batch: int, checkpoint: bool, repeats: int) -> tuple:
    """(median CPU s a step stacked, looped, the rounds' stacked ÷ loop (median, q1, q3)), in turns, the two engines'
    losses and masters compared after every round."""
    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.models import make_regression

    model = MLP(widths)
    params = model.init_params()
    batches = make_regression(np.random.default_rng(0), n, batch, widths)
    engines = {stack: ZeroEngine(model, Cluster(n, stack_ranks=stack), 3, Adam(lr=1e-3), policy("portable"),
                                 params=params, checkpoint=checkpoint) for stack in (True, False)}
    cpu = {stack: [] for stack in engines}
    order = random.Random(0)
    for round_ in range(repeats + 1):  # round 0 warms up (first-touch allocations, BLAS)
        names = list(engines)
        order.shuffle(names)
        losses = {}
        for stack in names:
            forget_kept_operands()  # untimed: neither finds the other's float64 copies and extents
            c, _ = timed(lambda: losses.__setitem__(stack, engines[stack].step(batches)))
            engines[stack].cluster.trace.clear()  # many steps keep no log from step to step
            if round_:
                cpu[stack].append(c)
        if losses[True] != losses[False] or not np.array_equal(engines[True].full_master(),
                                                               engines[False].full_master()):
            raise AssertionError(f"round {round_}: stacked and looped steps disagree: not the same arithmetic")
    rounds = [s / loop for s, loop in zip(cpu[True], cpu[False])]
    q1, _, q3 = statistics.quantiles(rounds, n=4) if len(rounds) > 1 else (rounds[0],) * 3
    return statistics.median(cpu[True]), statistics.median(cpu[False]), (statistics.median(rounds), q1, q3)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--case", choices=("small", "large", "both"), default="both")
    args = p.parse_args()
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    threads = {v: os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    print(f"ZeRO-3 step, bf16-mixed, Adam, portable kernels: ranks stacked (Cluster(N)) ÷ the loop over ranks "
          f"(Cluster(N, stack_ranks=False)); median of {args.repeats} in turns; CPU time; BLAS threads {threads}")
    print(f"load average before: {load()} (on {os.cpu_count()} cores)")
    print(f"{'MLP':<22} {'params':>9} {'N':>4} {'checkpointing':>13} {'stacked ms':>10} {'loop ms':>8} "
          f"{'stacked/loop':>12} {'rounds q1-q3':>12}")
    for name in (("large", "small") if args.case == "both" else (args.case,)):
        widths, n, batch, _ = CASES[name]
        size = sum(a * b + b for a, b in zip(widths, widths[1:]))
        for checkpoint in (False, True):
            mine, loop, (ratio, q1, q3) = measure(widths, n, batch, checkpoint, args.repeats)
            print(f"{str(widths):<22} {size:>9,} {n:>4} {'yes' if checkpoint else 'no':>13} {mine * 1e3:>10.1f} "
                  f"{loop * 1e3:>8.1f} {ratio:>12.2f} {f'{q1:.2f}-{q3:.2f}':>12}")
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
