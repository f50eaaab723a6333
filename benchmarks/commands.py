"""What a user waits for at the prompt: the CPU time of zerosim's text commands, each in a fresh process.

Each command runs as `python -m zerosim.cli.main ARGS` started from a source tree (`-m` puts that tree first on the
path), its CPU time (user + system of the child, interpreter start and imports included) read from the children's
resource usage. With --tree DIR, another tree's command runs beside each of this tree's, run after run in a new seeded
order each round (this, that, that, this, ...), every run a fresh process: the tenth round of issue 63 found that a
worker process kept for a whole benchmark can run 20-50 % slow for its life (benchmarks/trees.py `workers_apart`), so
no process here outlives one command. The two trees' stdout must be the same bytes (a speed-up changes no text); a
difference is printed beside the times. Round 0 warms up (the page cache; each tree's compiled bytecode, in a
temporary folder of this run's even where PYTHONDONTWRITEBYTECODE is set: trees.py `compiled_child`), untimed.

    python benchmarks/commands.py [--repeats 5] [--only validate,plan] [--tree DIR]

No target of its own: issue 63 bounds the README's `zerosim plan` (benchmarks/plan.py, 1.5 s); the others are
measured so that a change that slows what a user waits for shows.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one BLAS thread, as the tests run (the children inherit it)

import argparse  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/trees.py, however this file is run
from plan import ARGV as PLAN  # noqa: E402  (the README's plan, one place)
from trees import compiled_child, quartiles, rounds, source_tree  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this source tree
COMMANDS = {  # name -> the command's arguments: the README's and the longest text commands
    "replay": ["replay"],
    "plan": PLAN,
    "validate": ["validate"],
    "timeline": ["timeline"],
    "memory": ["memory"],
    "diff": ["diff", "--a", "--stage 2", "--b", "--stage 3"],
    # a pipeline beside TP, every ZeRO stage (`zerosim memory --help`'s example): the pipeline's whole step of M
    "memory-pp": ["memory", "--model", "llama-3-8b", "--ranks", "64", "--gpus-per-node", "8", "--tp", "2", "--pp", "4",
                  "--seq-len", "4096", "--batch", "1", "--checkpoint", "block", "--precision", "bf16-mixed",
                  "--accumulation-steps", "8"],
    # the planner beside pipelines of 1, 2 and 4 ranks (~15 s): a row that fits runs its memory step and a second
    # step for its line (analysis/costs line_points), the second writing the first's records again
    "plan-pp": ["plan", "--model", "llama-3-8b", "--gpus", "64", "--gpus-per-node", "8", "--gpu", "h100-80gb",
                "--seq-len", "4096", "--global-batch", "512", "--pp", "1,2,4"],
    # the planner beside tensor parallelism (`zerosim plan --help`'s 70B example): a row's line through K = 1 and 2,
    # the second point written from the first's log where TP's micro-steps are alike (analysis/planner/_repeat.py)
    "plan-tp": ["plan", "--model", "llama-3-70b", "--gpus", "256", "--gpu", "h100-80gb", "--seq-len", "8192",
                "--global-batch", "512", "--tp", "1,2,4,8", "--sp", "--stages", "3", "--strategies", "block,flash"],
    # the slowest published point (docs/validation.md's long-context table): Llama 3.1 405B on 512 H100s, TP 8, CP 8,
    # PP 8, a CP ring inside every pipeline stage whose ranks one representative stands for
    "validate-cp": ["validate", "--only", "tt-h100-512-405b-4d-cp8"],
    # the planner beside context parallelism (`zerosim plan --help`'s CP example), its second point written alike
    "plan-cp": ["plan", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "8192",
                "--global-batch", "8", "--cp", "1,2,4", "--stages", "3"],
}


PYTHON, ENV = compiled_child()  # each tree's bytecode compiled once, by the untimed first round (trees.py)


def run(tree: str, args: list) -> tuple:
    """(CPU seconds, stdout bytes) of `python -m zerosim.cli.main args` started in `tree`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([*PYTHON, "-m", "zerosim.cli.main", *args], cwd=tree, capture_output=True, env=ENV)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{tree}: zerosim {' '.join(args)} exited {done.returncode}:\n{done.stderr.decode()[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def measure(trees: dict, names: list, repeats: int) -> tuple:
    """({(side, name): [CPU s of each timed round]}, {name: whether every side printed the same bytes})."""
    cpu = {(side, name): [] for side in trees for name in names}
    printed = {}
    order = random.Random(0)
    for round_ in range(repeats + 1):
        runs = [(side, name) for side in trees for name in names]
        order.shuffle(runs)
        for side, name in runs:
            seconds, out = run(trees[side], COMMANDS[name])
            printed.setdefault(name, {})[side] = out
            if round_:
                cpu[side, name].append(seconds)
    return cpu, {name: len(set(outs.values())) == 1 for name, outs in printed.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=rounds, default=5)
    p.add_argument("--only", default=",".join(COMMANDS), help="commands, comma-separated: " + ", ".join(COMMANDS))
    p.add_argument("--tree", type=source_tree, help="another source tree, its commands in turns with this one's")
    args = p.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in COMMANDS]
    if unknown:
        p.error(f"argument --only: no command {', '.join(unknown)} (choose from {', '.join(COMMANDS)})")
    trees = {"this": HERE} | ({"that": args.tree} if args.tree else {})
    print(f"load {os.getloadavg()[0]:.1f}; {args.repeats} timed rounds, each command a fresh process, CPU s "
          "(median, q1-q3)")
    cpu, same = measure(trees, names, args.repeats)
    for name in names:
        cells = []
        for side in trees:
            xs = cpu[side, name]
            q1, q3 = quartiles(xs)
            cells.append(f"{side} {statistics.median(xs):6.2f} ({q1:.2f}-{q3:.2f})")
        if args.tree:
            ratio = statistics.median(cpu["this", name]) / statistics.median(cpu["that", name])
            cells.append(f"this ÷ that {ratio:.2f}" + ("" if same[name] else "  PRINTED DIFFERENT BYTES"))
        print(f"{name:9s} " + "   ".join(cells))
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
