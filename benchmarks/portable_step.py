"""What the portable arithmetic (the default) costs a training step: the same ZeRO-3 engine under "portable" and
"native" products, in turns (issue 63, Must show 1).

`ZeroEngine(MLP, Cluster(N), 3, Adam(lr=1e-3), precision)` with the precision's default arithmetic ("portable": each
product's exact dot products rounded once to fp32, the same bits on every machine; zerosim/precision/arithmetic/)
against the same engine with `arithmetic="native"` (the machine's sgemm on the fp32-widened operands), for bf16-mixed
and fp32, at 919k parameters on 8 ranks and 10M on 4. Each round steps every contender once in a new seeded order;
CPU time of this process (BLAS pinned to one thread), median of --repeats after a warm-up round, and the quartiles
of the rounds' own portable ÷ native. The two arithmetics give different bits, so there is nothing to compare but
time; each engine's losses are checked finite.

Before each step the portable kernels' memo of operands is emptied, untimed (benchmarks/peers.py
`forget_kept_operands`): the two engines multiply the same weights, and the second would find the first's float64
copies. Their scratch buffers stay, as a run keeps them from step to step (--drop-buffers lets them go, as this
benchmark did until 2026-11-26: every portable step then took its scratch as fresh pages, which no run does; at 919k
on 8 ranks both ways read alike within their rounds' spread, bf16 1.43-1.44 kept against 1.44-1.46 let go).

For fp32, a third engine in the same turns measures the floor of the portable design (--floor; benchmarks/peers.py
`floor_step`): the portable engine with every matrix product replaced, while it steps, by what each exact product
costs at the least: both operands widened to float64 into reused buffers as the kernel widens them, one float64 GEMM
into a reused buffer (by blocks of rows that stay in cache for a short K, as the exact kernel makes a rank's dW),
its sums rounded once into the output, and no proof (zerosim/precision/arithmetic/_exact_matmul.py does the same
three things and then proves the rounding; DESIGN.md "The same numbers everywhere"). Its bits are not proved (a
float64 sum of fp32 products is not exact, though on the 30 products of a 919k, N = 8 step, 8.3 million elements,
every one came out as the exact product's), so only its time counts; portable ÷ floor is what the proof and its
settling cost. (For bf16 the exact products read the operands' facts and keep widened weights, which a plain
widening would not match.) Until 2026-11-26 the floor rounded a whole float64 c read back from memory: 1.58-1.79x
native at 10M on 4 ranks, where the blocked one reads 1.40 (the same run: 361 ms against 258); and it copied a
transposed weight into rows, which the kernel does not: 1.35-1.46x native at 10M, where widened as the kernel widens
reads 1.27 (benchmarks/proof_bound.py).

With --faults, each engine's minor page faults and system CPU ms per step too (medians of the same rounds, from
`resource.getrusage` of this process around each step): memory fresh from the system costs a fault per 4 kB page,
which the step's user time does not show. They depend on the heap's history (glibc hands large blocks back to the
system and maps them afresh), so compare them within one run of one case, or run one case per process.

With --tree DIR, the same engines of another source tree (e.g. a checkout of the commit before a change) step in
the same rounds, in turns with this tree's: each tree's engines in a worker process of their own, fed the same
parameters and batches, each step's CPU seconds measured inside its worker (benchmarks/trees.py says why and how).
Each row is then one engine: both trees' medians, this ÷ that with the quartiles of the rounds' own ratios, and each
tree's engine ÷ its own native engine. Where the two workers' native engines (the same code, unless a change
touched it) read more than 5 % apart, the run says so (benchmarks/trees.py `workers_apart`): the ratios ÷ native
are then taken in unlike workers, and a run of each tree alone, one after the other, reads them better.

Targets (issue 63): portable ÷ native <= 1.25 for bf16-mixed at 919k, <= 1.5 for fp32 (at 919k and 10M).

    python benchmarks/portable_step.py [--repeats 9] [--cases 919k:8,10M:4] [--precisions bf16-mixed,fp32] [--floor]
        [--faults] [--drop-buffers] [--tree DIR]
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
from peers import BATCH, MODELS, floor_step, forget_kept_operands, measured_tree  # noqa: E402  (the models and rows per rank issue 63 measures everywhere; the floor)
from trees import Side, compared, in_turns, quartiles, rounds, source_tree, started, workers_apart  # noqa: E402  (--tree: another tree's engines in turns)

TARGETS = {"bf16-mixed": 1.25, "fp32": 1.5}


def engines(widths, n: int, precision: str, floor: bool = False, params=None) -> dict:
    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.precision import get_precision

    model = MLP(widths)
    params = model.init_params() if params is None else params
    policy = get_precision(precision)
    arithmetic = {"portable": "portable", "native": "native", **({"floor": "portable"} if floor else {})}
    return {name: ZeroEngine(model, Cluster(n), 3, Adam(lr=1e-3), policy.with_(arithmetic=a), params=params)
            for name, a in arithmetic.items()}


def stepper(runs: dict, name: str, batches):
    """The call that steps engine `name` once (the floor: the portable engine under `floor_step`)."""
    return (lambda: floor_step(runs[name], batches)) if name == "floor" else (lambda: runs[name].step(batches))


def tidy(runs: dict, name: str, losses) -> None:
    """After a step, untimed: the losses checked finite (the two arithmetics give different bits: there is nothing
    else to check). The trace is kept as a run keeps it: a `Cluster(N)`'s window holds the last steps and folds the
    oldest, every step (cluster/_window.py), as benchmarks/yardstick.py measures since the eleventh round of issue
    63. Until the twelfth round (2026-11-26) this emptied it after every step, which left the fold out (at 919k on 8
    ranks the two read alike: 117 against 115 ms)."""
    if not all(math.isfinite(x) for x in losses):
        raise FloatingPointError(f"{name}: a loss is not finite")


def tree_side(widths, n: int, precision: str, floor: bool, params, batches) -> Side:
    """The engines of the zerosim this process imports, for a worker of benchmarks/trees.py (--tree)."""
    runs = engines(widths, n, precision, floor, params)
    return Side({a: stepper(runs, a, batches) for a in runs}, after=lambda a, losses: tidy(runs, a, losses))


def measure_trees(widths, n: int, precision: str, repeats: int, floor: bool, drop_buffers: bool, tree: str) -> tuple:
    """({(side, engine): [CPU s of each round]}, {side: the tree its worker imported}) for side "this" (the zerosim
    this script imports) and "that" (`tree`), every engine of both in one shuffled order each round."""
    from zerosim import MLP
    from zerosim.models import make_regression

    inputs = dict(widths=list(widths), n=n, precision=precision, floor=floor, params=MLP(widths).init_params(),
                  batches=make_regression(np.random.default_rng(0), n, BATCH, widths))
    with started({"this": measured_tree(), "that": tree}, "portable_step", "tree_side", drop_buffers, **inputs) as w:
        return in_turns(w, repeats), {side: worker.tree for side, worker in w.items()}


def measure(widths, n: int, precision: str, repeats: int, floor: bool = False, drop_buffers: bool = False) -> tuple:
    """({engine: median CPU s}, (q1, q3) of the rounds' portable ÷ native, {engine: (median minor page faults,
    median system CPU s) per step})."""
    import resource

    from zerosim.models import make_regression

    batches = make_regression(np.random.default_rng(0), n, BATCH, widths)
    runs, order = engines(widths, n, precision, floor), random.Random(0)
    cpu, faults, system = ({a: [] for a in runs} for _ in range(3))
    for round_ in range(repeats + 1):  # round 0 warms up
        names = list(runs)
        order.shuffle(names)
        for a in names:
            forget_kept_operands(drop_buffers)  # untimed: neither finds the other's widened weights (docstring)
            before, c = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
            losses = stepper(runs, a, batches)()
            if round_:
                cpu[a].append(time.process_time() - c)
                after = resource.getrusage(resource.RUSAGE_SELF)
                faults[a].append(after.ru_minflt - before.ru_minflt)
                system[a].append(after.ru_stime - before.ru_stime)
            tidy(runs, a, losses)
    rounds = sorted(p / q for p, q in zip(cpu["portable"], cpu["native"]))
    spread = quartiles(rounds)
    paging = {a: (statistics.median(faults[a]), statistics.median(system[a])) for a in runs}
    return {a: statistics.median(v) for a, v in cpu.items()}, spread, paging


def compare_trees(args) -> None:
    """--tree: a row per engine, this tree's and that tree's medians, this ÷ that (the rounds' quartiles), and each
    tree's engine ÷ its own native engine."""
    from zerosim import MLP

    print(f"ZeRO-3, Adam, Cluster(N) defaults; two source trees in turns, each tree's engines in a worker process of "
          f"their own; CPU ms per step measured in the worker, median of {args.repeats}; BLAS threads "
          f"{os.environ['OPENBLAS_NUM_THREADS']}; load average before {os.getloadavg()[0]:.2f}; the kernels' scratch "
          f"buffers {'let go' if args.drop_buffers else 'kept'} between steps")
    print("this/that: the ratio of the medians; rounds q1-q3: the quartiles of each round's own this/that; "
          "÷ native: each tree's engine against its own native engine")
    head = (f"{'MLP':<24} {'params':>10} {'N':>3} {'precision':>10} {'engine':>8} {'this ms':>9} {'that ms':>9} "
            f"{'this/that':>9} {'rounds q1-q3':>12} {'÷ native this':>13} {'that':>5}")
    trees = None
    for case in args.cases.split(","):
        name, n = case.split(":")
        widths = MODELS[name]
        for precision in args.precisions.split(","):
            cpu, seen = measure_trees(widths, int(n), precision, args.repeats, args.floor and precision == "fp32",
                                      args.drop_buffers, args.tree)
            if seen != trees:
                trees = seen
                print(f"this: zerosim from {seen['this']}; that: zerosim from {seen['that']} (each asked in its "
                      f"worker)\n{head}")
            native = compared(cpu, "native")
            for engine in dict.fromkeys(a for _, a in cpu):
                mine, theirs, ratio, (q1, q3) = compared(cpu, engine)
                print(f"{str(widths):<24} {MLP(widths).num_params:>10,} {n:>3} {precision:>10} {engine:>8} "
                      f"{mine * 1e3:>9.1f} {theirs * 1e3:>9.1f} {ratio:>9.3f} {q1:>6.3f}-{q3:<5.3f} "
                      f"{mine / native[0]:>13.2f} {theirs / native[1]:>5.2f}", flush=True)
            warning = workers_apart("native", native[2])  # when the change leaves the native engine alone
            if warning:
                print(warning)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def main():
    from zerosim import MLP

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=rounds, default=9)
    p.add_argument("--cases", default="919k:8,10M:4", help="MODEL:N,... (MODEL: 919k or 10M)")
    p.add_argument("--precisions", default="bf16-mixed,fp32")
    p.add_argument("--floor", action="store_true", help="fp32 rows: also the portable engine with every product a "
                   "float64 GEMM rounded once and no proof, in the same turns (the design's floor)")
    p.add_argument("--faults", action="store_true", help="also each engine's minor page faults and system CPU ms per "
                   "step (medians)")
    p.add_argument("--drop-buffers", action="store_true", help="let the portable kernels' scratch buffers go before "
                   "every step, as this benchmark did until 2026-11-26 (a run keeps them)")
    p.add_argument("--tree", type=source_tree, help="another source tree (e.g. a checkout of the commit before a "
                   "change): its engines in the same rounds, in turns, each tree's in a worker process of its own")
    args = p.parse_args()
    if args.tree is not None and args.faults:
        p.error("--faults counts this process's page faults; with --tree the engines step in worker processes")
    if args.tree is not None:
        return compare_trees(args)
    print(f"ZeRO-3, Adam, Cluster(N) defaults; CPU ms per step, median of {args.repeats} in turns; BLAS threads "
          f"{os.environ['OPENBLAS_NUM_THREADS']}; load average before {os.getloadavg()[0]:.2f}; the kernels' scratch "
          f"buffers {'let go' if args.drop_buffers else 'kept'} between steps; zerosim from {measured_tree()}")
    floor_head = f" {'floor ms':>9} {'portable/floor':>14}" if args.floor else ""
    faults_head = f" {'faults p/n':>13} {'sys ms p/n':>11}" if args.faults else ""
    print(f"{'MLP':<24} {'params':>10} {'N':>3} {'precision':>10} {'native ms':>10} {'portable ms':>12} "
          f"{'portable/native':>15} {'rounds q1-q3':>12} {'target':>7}{floor_head}{faults_head}")
    for case in args.cases.split(","):
        name, n = case.split(":")
        widths = MODELS[name]
        for precision in args.precisions.split(","):
            t, (q1, q3), paging = measure(widths, int(n), precision, args.repeats, args.floor and precision == "fp32",
                                          args.drop_buffers)
            params = MLP(widths).num_params
            floor = f" {t['floor'] * 1e3:>9.1f} {t['portable'] / t['floor']:>14.2f}" if "floor" in t else ""
            (pf, ps), (nf, ns) = paging["portable"], paging["native"]
            floor += f" {f'{pf:.0f}/{nf:.0f}':>13} {f'{ps * 1e3:.1f}/{ns * 1e3:.1f}':>11}" if args.faults else ""
            print(f"{str(widths):<24} {params:>10,} {n:>3} {precision:>10} {t['native'] * 1e3:>10.1f} "
                  f"{t['portable'] * 1e3:>12.1f} {t['portable'] / t['native']:>15.2f} {q1:>7.2f}-{q3:<4.2f} "
                  f"{'<= ' + str(TARGETS[precision]):>7}{floor}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
