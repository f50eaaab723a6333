"""How long the strategies for many nodes take at real scale: `zerosim memory` and `zerosim timeline` for GPT-3 175B on
4096 GPUs, 8 per node, each strategy (FULL_SHARD, HSDP, MiCS, hpZ), and the strategy sweep (4 strategies × 7 N).

The work: each command runs in this process (`zerosim.cli.main.main`, output discarded), from its arguments to its
table: the meta step of the strategy over its groups, the ledgers, the simulation on two link tiers. The yardstick
does the same kind of work without a mesh: `zerosim timeline --stage 3` at the same N, a flat ring over one link
(today's single step). Each is timed in turns, medians of --repeats; ratio = strategy ÷ flat.

    python benchmarks/mesh.py [--repeats 3] [--no-sweep]

Targets (issue 22, must-show 5): each command under 1 s; the sweep of 4 strategies × 7 sizes under 10 s.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads: one BLAS thread, as the tests run

import argparse
import contextlib
import io
import statistics
import time

from zerosim.cli.main import main as zerosim

STRATEGIES = ("full_shard", "hsdp", "mics", "hpz")
MODEL = ("--model", "gpt3-175b", "--ranks", "4096")
NODES = ("--gpus-per-node", "8")
SHARD_GROUP = ("--shard-group", "64")  # S = 64: HSDP's and MiCS's states fit an 80 GB GPU (only theirs take a group:
# the command refuses it beside FULL_SHARD and hpZ, whose secondary group is the node)
GROUPED = ("hsdp", "mics")
COMMAND_TARGET, SWEEP_TARGET = 1.0, 10.0


def seconds(argv) -> float:
    """Wall seconds of one `zerosim ARGV` in this process, its output discarded."""
    out = io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = zerosim(list(argv))
    took = time.perf_counter() - t
    if code != 0:
        raise SystemExit(f"zerosim {' '.join(argv)} exited {code}")
    return took


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-sweep", action="store_true", help="skip the 4 × 7 sweep")
    args = p.parse_args()
    print(f"GPT-3 175B, N = 4096 on nodes of 8 (S = 64 for HSDP and MiCS, S' = 8 for hpZ); median of {args.repeats}, "
          f"in turns; BLAS threads {os.environ['OPENBLAS_NUM_THREADS']}; load {os.getloadavg()[0]:.1f}")
    flat = ("timeline", *MODEL, "--stage", "3")
    commands = {(cmd, s): (cmd, *MODEL, *NODES, *(SHARD_GROUP if s in GROUPED else ()), "--strategy", s)
                for cmd in ("memory", "timeline") for s in STRATEGIES}
    seconds(flat)  # imports and caches warmed before anything is timed
    times = {k: [] for k in [*commands, "flat"]}
    for _ in range(args.repeats):
        times["flat"].append(seconds(flat))
        for key, argv in commands.items():
            times[key].append(seconds(argv))
    base = statistics.median(times["flat"])
    print(f"  yardstick: zerosim timeline --stage 3 (flat ring)      {base:7.3f} s")
    worst = 0.0
    for (cmd, s), runs in ((k, v) for k, v in times.items() if k != "flat"):
        t = statistics.median(runs)
        worst = max(worst, t)
        print(f"  zerosim {cmd:8s} --strategy {s:10s}            {t:7.3f} s   ratio to the flat step {t / base:5.2f}")
    print(f"  every command {'under' if worst < COMMAND_TARGET else 'OVER'} the {COMMAND_TARGET:g} s target "
          f"(slowest {worst:.3f} s)")
    if not args.no_sweep:
        sweep = ("timeline", "--model", "gpt3-175b", "--sweep", "--gpus-per-node", "8", "--strategy",
                 ",".join(STRATEGIES), "--json")
        runs = [seconds(sweep) for _ in range(args.repeats)]
        t = statistics.median(runs)
        print(f"  zerosim timeline --sweep --strategy {','.join(STRATEGIES)} (4 × 7 N, 64 .. 4096): {t:.3f} s, "
              f"{t / 28:.3f} s a step ({t / 28 / base:.2f} × the flat step); "
              f"{'under' if t < SWEEP_TARGET else 'OVER'} the {SWEEP_TARGET:g} s target")


if __name__ == "__main__":
    main()
