"""`zerosim diff` of two 10k-parameter runs over 10 steps, against the two runs trained alone.

Each round trains run A and run B as `zerosim train` does (no recorder) and diffs them (both runs recorded, the
float64 yardstick, the comparison and the explanation), in a seeded shuffled order; the ratio is diff's time over the
two runs' together, each round's own, and the median of the rounds with its quartiles (CPU time: the process's).
The pairs: identical configurations, and a pair that parts at step 1 (2 ranks × 2 accumulation steps against 4
ranks).

Target (issue 61, Must show 3): a diff of two 10k-parameter runs over 10 steps under 2× the two runs.

    python benchmarks/diff.py [--repeats 7]
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

WIDTHS = (16, 128, 64, 4)  # 10,692 parameters
STEPS = 10


def pairs():
    from zerosim.train import TrainConfig

    base = TrainConfig(widths=WIDTHS, steps=STEPS)
    return {"identical": (base, base),
            "2 ranks x 2 accumulation vs 4 ranks": (dataclasses.replace(base, ranks=2, accumulation_steps=2), base)}


def cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def measure(a, b, repeats: int, seed: int = 0) -> tuple:
    """(median ratio, q1, q3, median diff s, median runs s, the last report)."""
    from zerosim.diff import diff
    from zerosim.train import train

    rng, ratios, diffs, runs, report = random.Random(seed), [], [], [], None
    for _ in range(repeats + 1):  # the first round warms up and is dropped
        order = ["runs", "diff"]
        rng.shuffle(order)
        took = {}
        for what in order:
            if what == "runs":
                took[what] = cpu(lambda: (train(a), train(b)))
            else:
                def run():
                    nonlocal report
                    report = diff(a, b)
                took[what] = cpu(run)
        ratios.append(took["diff"] / took["runs"])
        diffs.append(took["diff"])
        runs.append(took["runs"])
    ratios, diffs, runs = ratios[1:], diffs[1:], runs[1:]
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return statistics.median(ratios), q[0], q[2], statistics.median(diffs), statistics.median(runs), report


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    threads = {v: os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    print(f"zerosim diff ÷ the two runs alone: MLP {list(WIDTHS)} (10,692 params), {STEPS} steps, bf16-mixed, "
          f"ZeRO-2; median of {args.repeats} rounds in turns; CPU time; BLAS threads {threads}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (on {os.cpu_count()} cores)")
    print(f"{'pair':<38} {'diff s':>7} {'runs s':>7} {'diff/runs':>9} {'rounds q1-q3':>13}  report")
    for name, (a, b) in pairs().items():
        ratio, q1, q3, d, r, report = measure(a, b, args.repeats)
        said = "identical" if report.identical else f"parts at {report.parting.tensor.describe()}"
        print(f"{name:<38} {d:>7.3f} {r:>7.3f} {ratio:>9.2f} {q1:>6.2f}-{q3:<6.2f}  {said}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
