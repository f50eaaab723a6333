"""A long `zerosim train`: its resident memory step by step, to show the trace no longer grows without bound.

Runs `zerosim train --steps S --print-every P [ARGS]` in a subprocess and, each time it prints a step's loss, reads
the process's resident set (VmRSS in /proc/<pid>/status). The trace holds its last steps' events and a summary of
the rest (cluster/_window.py); before it did, it kept every step's (52 kB a step with the default MLP).

Target (issue 41, Must show 4): RSS flat after the first steps of a 10,000-step run.

    python benchmarks/long_run.py [--steps 10000] [--print-every 500] [-- extra zerosim train arguments]
"""

import argparse
import os
import subprocess
import sys
import time


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10000)
    p.add_argument("--print-every", type=int, default=500)
    p.add_argument("extra", nargs="*", help="more `zerosim train` arguments (after --)")
    args = p.parse_args()
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
