"""What `zerosim plan --jobs N` (and `validate`'s, `figures`') saves a user waiting at the prompt: wall time of the same
command on N worker processes against one, in turns, each run a fresh process.

The yardstick is the same command with --jobs 1: the same pieces (each strategy of a stage beside each combination
of degrees; each published point; each figure), made one after the other in one process. Both print the same bytes,
and `figures` writes the same files (checked every run, each run into a new temporary folder); the ratio is wall time,
which is what --jobs changes. The CPU of every process (the command's and its workers', read from the children's
resource usage) is printed beside it: the workers' forks and each one's twins built again cost a little more CPU in
all, which is the price of the wall time.

    python benchmarks/plan_jobs.py [--command plan-pp] [--jobs 2] [--repeats 3]

Its commands are benchmarks/commands.py's (`COMMANDS`, one place): plan-pp (Llama 3 8B on 64 GPUs beside pipelines
of 1, 2 and 4), plan-tp (the 70B TP example), plan (the README's: three stages pruned on their model states at once,
ten strategies at ZeRO-3), validate; and `figures` (every figure, 18 pieces). A command of k pieces gains at most
min(N, k)-fold, less where one piece is most of the work.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/, however this file is run
from commands import COMMANDS, HERE  # noqa: E402
from trees import quartiles, rounds  # noqa: E402


FIGURES = ["figures"]  # every figure, into a new temporary folder each run (`--out`)


def run(args: list) -> tuple:
    """(wall seconds, CPU seconds of the command and its workers, what it made) of `python -m zerosim.cli.main args`:
    its stdout, and for `figures` the files it wrote, by name, and its stdout with the folder's name taken out."""
    with tempfile.TemporaryDirectory() as out:
        figures = args[0] == "figures"
        args = [*args, "--out", out] if figures else args
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "zerosim.cli.main", *args], cwd=HERE, capture_output=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode:
            raise SystemExit(f"zerosim {' '.join(args)} exited {done.returncode}:\n{done.stderr.decode()[-2000:]}")
        made = done.stdout
        if figures:
            made = (made.replace(out.encode(), b"OUT"),
                    tuple(sorted((name, open(os.path.join(out, name), "rb").read()) for name in os.listdir(out))))
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), made


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = {**{n: c for n, c in COMMANDS.items() if n.startswith("plan") or n == "validate"}, "figures": FIGURES}
    p.add_argument("--command", choices=list(commands), default="plan-pp")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--repeats", type=rounds, default=3)
    args = p.parse_args()
    sides = {"one": "1", f"{args.jobs} jobs": str(args.jobs)}
    wall, cpu, printed, order = {s: [] for s in sides}, {s: [] for s in sides}, set(), random.Random(0)
    print(f"zerosim {' '.join(commands[args.command])}\nload {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
          f"{args.repeats} timed rounds, sides in a new seeded order each round, each run a fresh process")
    for round_ in range(args.repeats + 1):  # round 0 warms up
        names = list(sides)
        order.shuffle(names)
        for side in names:
            w, c, out = run([*commands[args.command], "--jobs", sides[side]])
            printed.add(out)
            if round_:
                wall[side].append(w)
                cpu[side].append(c)
    if len(printed) > 1:
        raise SystemExit("the two sides printed (or wrote) different bytes")
    for side in sides:
        q1, q3 = quartiles(wall[side])
        print(f"{side:>8}: wall {statistics.median(wall[side]):6.2f} s ({q1:.2f}-{q3:.2f}), CPU in all "
              f"{statistics.median(cpu[side]):6.2f} s")
    one, many = (statistics.median(wall[s]) for s in sides)
    print(f"wall, {args.jobs} jobs ÷ one: {many / one:.2f}; the same bytes printed every run; load "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
