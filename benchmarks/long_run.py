"""A long `zerosim train`: its resident memory step by step, to show the trace no longer grows without bound.

Runs `zerosim train --steps S --print-every P [ARGS]` in a subprocess and, each time it prints a step's loss, reads
the process's resident set (VmRSS in /proc/<pid>/status). The trace holds its last steps' events and a summary of
the rest (cluster/_window.py); before it did, it kept every step's (52 kB a step with the default MLP).

Target (issue 41, Must show 4): RSS flat after the first steps of a 10,000-step run.

    python benchmarks/long_run.py [--steps 10000] [--print-every 500] [-- extra zerosim train arguments]

With --hand-made the run is a notebook's instead: `Cluster(4)` made by hand with its defaults (an event per hop, the
ledgers' timelines, the default window of cluster/_window.py), ZeRO-3 on `zerosim train`'s MLP (16,64,64,4), bf16,
in this process; --keep-steps none holds every step (what a hand-made Cluster did before the default window).

    python benchmarks/long_run.py --hand-made [--keep-steps auto|none|K] [--steps 3000] [--print-every 250]

With --fold-cost: what a step past the window costs. Two such hand-made runs step in turns (a new seeded order each
round), one folding a step at every step's end (`keep_steps=1`, as the default window does past its 1,024 steps),
one holding every step (`keep_steps=None`); the median of the rounds' own CPU ratios, after 50 rounds of warm-up,
with its quartiles; the two runs' masters compared at the end.

    python benchmarks/long_run.py --fold-cost [--steps 400]
"""

import argparse
import os
import subprocess
import sys
import time


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def hand_made(steps: int, every: int, keep: str) -> None:
    """A hand-made Cluster's run in this process: RSS and the entries its trace holds, every `every` steps."""
    import numpy as np

    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.models import make_regression

    keep_steps = None if keep == "none" else keep if keep == "auto" else int(keep)
    cluster, widths = Cluster(4, keep_steps=keep_steps), [16, 64, 64, 4]
    model = MLP(widths)
    engine = ZeroEngine(model, cluster, 3, Adam(lr=1e-3), "bf16-mixed", params=model.init_params())
    batches = [make_regression(np.random.default_rng(s), 4, 16, widths) for s in range(8)]
    print(f"Cluster(4, keep_steps={keep_steps!r}), ZeRO-3, MLP {widths}, bf16-mixed; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'step':>6} {'RSS MB':>8} {'log held':>9} {'log length':>11} {'wall s':>7}")
    t0, samples = time.perf_counter(), []
    for step in range(1, steps + 1):
        engine.step(batches[step % len(batches)])
        if step == 1 or step % every == 0:
            t = cluster.trace
            samples.append((step, rss_mb(os.getpid())))
            print(f"{step:>6} {samples[-1][1]:>8.1f} {len(t._log):>9,} {len(t.log):>11,} "
                  f"{time.perf_counter() - t0:>7.1f}", flush=True)
    if len(samples) >= 3:  # the second half of the run: past the default window's 1024 steps in a 3000-step run
        (a, ra), (b, rb) = samples[len(samples) // 2], samples[-1]
        print(f"RSS from step {a} to {b}: {ra:.1f} -> {rb:.1f} MB ({(rb - ra) / (b - a) * 1000:+.2f} MB per 1,000 "
              "steps)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def fold_cost(steps: int) -> None:
    """A step that folds one against a step that holds everything: CPU per step, in turns."""
    import random
    import statistics

    import numpy as np

    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.models import make_regression

    widths = [16, 64, 64, 4]
    model = MLP(widths)
    params = model.init_params()
    runs = {keep: ZeroEngine(model, Cluster(4, keep_steps=keep), 3, Adam(lr=1e-3), "bf16-mixed", params=params)
            for keep in (1, None)}
    batches = [make_regression(np.random.default_rng(s), 4, 16, widths) for s in range(8)]
    print(f"Cluster(4) by hand, ZeRO-3, MLP {widths}, bf16-mixed, an event per hop: keep_steps=1 (a step folds at "
          f"every step's end) against keep_steps=None, {steps} steps in turns; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    cpu, order = {keep: [] for keep in runs}, random.Random(0)
    for step in range(steps):
        keeps = list(runs)
        order.shuffle(keeps)
        for keep in keeps:
            start = time.process_time()
            runs[keep].step(batches[step % len(batches)])
            cpu[keep].append(time.process_time() - start)
    if not np.array_equal(runs[1].full_master(), runs[None].full_master()):
        raise AssertionError("the folding run and the holding run disagree: not the same arithmetic")
    warm = min(50, steps // 2)
    rounds = [a / b for a, b in zip(cpu[1][warm:], cpu[None][warm:])]
    q1, _, q3 = statistics.quantiles(rounds, n=4) if len(rounds) > 1 else (rounds[0],) * 3
    print(f"CPU a step: folding {statistics.median(cpu[1][warm:]) * 1e3:.2f} ms, holding "
          f"{statistics.median(cpu[None][warm:]) * 1e3:.2f} ms; folding / holding {statistics.median(rounds):.3f} "
          f"(rounds' quartiles {q1:.3f}-{q3:.3f})")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=None, help="steps to run (default: 10000; 400 with --fold-cost)")
    p.add_argument("--print-every", type=int, default=500)
    p.add_argument("--hand-made", action="store_true", help="a hand-made Cluster(4) in this process instead")
    p.add_argument("--keep-steps", default="auto", help="with --hand-made: auto (the default window), none, or K")
    p.add_argument("--fold-cost", action="store_true", help="a step that folds one against one that holds all")
    p.add_argument("extra", nargs="*", help="more `zerosim train` arguments (after --)")
    args = p.parse_args()
    if args.steps is not None and args.steps < (2 if args.fold_cost else 1):
        p.error(f"--steps must be at least {2 if args.fold_cost else 1}, got {args.steps}")
    if args.fold_cost:
        return fold_cost(args.steps or 400)
    args.steps = args.steps or 10000
    if args.hand_made:
        return hand_made(args.steps, args.print_every, args.keep_steps)
    zerosim = os.path.join(os.path.dirname(sys.executable), "zerosim")
    argv = [zerosim, "train", "--steps", str(args.steps), "--print-every", str(args.print_every), *args.extra]
    print(f"{' '.join(argv[1:])}\nload average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    t0 = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=dict(os.environ, TQDM_DISABLE="1"))
    samples = []
    for line in child.stdout:
        words = line.split()  # "step   500  loss 0.0123"
        if len(words) >= 2 and words[0] == "step" and words[1].isdigit():
            try:
                samples.append((int(words[1]), rss_mb(child.pid), time.perf_counter() - t0))
            except (FileNotFoundError, StopIteration):
                break
    child.wait()
    print(f"{'step':>6} {'RSS MB':>8} {'wall s':>7}")
    for step, rss, t in samples:
        print(f"{step:>6} {rss:>8.1f} {t:>7.1f}")
    if len(samples) >= 3:
        first = samples[min(1, len(samples) - 1)]
        last = samples[-1]
        per_k = (last[1] - first[1]) / max(last[0] - first[0], 1) * 1000
        print(f"RSS from step {first[0]} to {last[0]}: {first[1]:.1f} -> {last[1]:.1f} MB ({per_k:+.3f} MB per 1,000 "
              f"steps)")
    print(f"exit {child.returncode}; load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
