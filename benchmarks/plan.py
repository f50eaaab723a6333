"""How long `zerosim plan` takes for Llama-3-70B on 64 H100s, against the same search done the long way.

The work (issue 23): every ZeRO stage × checkpointing strategy × micro-batch dividing the 16 sequences each GPU
takes per step (1,024 sequences of 4,096 tokens on 64 GPUs, 8 per node), the memory of each on the meta backend and
the step time of each that fits an H100 80GB, ranked. zerosim's planner skips the stages whose model states alone
cannot fit, stops each strategy at its first micro-batch that does not fit, reuses the memory run as the first
micro-step, writes the step of two micro-steps from that run's log where the second repeats the first (stages 2/3:
analysis/planner/_repeat.py, held event by event to the engine's own in tests/test_plan.py) and extends the line
through one and two micro-steps. The yardstick does what a user would with the
CLI: every configuration measured (`measure_stage`), and every one that fits simulated micro-step by micro-step
(`meta_step` with K micro-steps), then sorted. Both must give the same ranking (checked: the same configurations
in the same order, step times within 1e-12). Measured in turns; median of --repeats for the planner, the
yardstick once per round (it is slow).

The command itself (issue 63: the README's `zerosim plan` at most 1.5 s of CPU): `python -m zerosim.cli.main plan`
with the README's flags in a fresh process, its CPU time (user + system, the child's `resource.getrusage`), imports
and the interpreter's start included; its work alone (the command run twice in one fresh process, the second
timed: imports excluded); and the planner's own CPU (`time.process_time` around `plan` with its defaults). Run it
from the repository root (`-m` puts the working directory first). `--tree DIR` runs the command from another source
tree too (e.g. a checkout of the commit before), in turns with this one, and says whether the two printed the same
bytes. Under PYTHONDONTWRITEBYTECODE every run compiles the modules it imports from source (~0.25 s here).

    python benchmarks/plan.py [--repeats 3] [--no-baseline] [--tree DIR]

Targets: the planner under 10 s on this machine (issue 23); the command at most 1.5 s of CPU (issue 63).
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads: one BLAS thread, as the tests run

import argparse
import itertools
import resource
import statistics
import subprocess
import sys
import time

from zerosim.analysis.costs import ALLOCATOR_RESERVE, get_gpu, get_preset, measure_stage, runtime_overheads
from zerosim.analysis.planner import divisors, meta_step, plan
from zerosim.analysis.timeline import Hardware
from zerosim.models.gpt import ALL_STRATEGIES, strategy_options
from zerosim.models.llama import MetaLlama
from zerosim.parallel.data import get_comm_schedule
from zerosim.precision import get_precision

TARGET = 10.0
COMMAND_TARGET = 1.5  # CPU seconds, the whole command (issue 63)
RANKS, PER_NODE, GPU, L, GLOBAL = 64, 8, "h100-80gb", 4096, 1024


def planner(config):
    """(CPU seconds of `plan` in this process, imports excluded; the fitting rows)."""
    t = time.process_time()
    p = plan(config, RANKS, PER_NODE, GPU, L, GLOBAL)
    return time.process_time() - t, [(r.stage, r.strategy, r.micro_batch, r.step_s) for r in p.fitting]


ARGV = ["plan", "--model", "llama-3-70b", "--gpus", str(RANKS), "--gpus-per-node", str(PER_NODE), "--gpu", GPU,
        "--seq-len", str(L), "--global-batch", str(GLOBAL)]  # the README's command
# the command twice in one fresh process: the second's CPU is its work alone, every module imported by the first
TWICE = """import contextlib, io, sys, time
from zerosim.cli.main import main
for _ in range(2):
    t = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        main(sys.argv[1:])
print(time.process_time() - t)
"""


def command_work(tree=None) -> float:
    """CPU seconds of the command's work alone: its second run in one process (imports excluded; what a module
    keeps between calls, e.g. the kernels' seconds by work, kept too)."""
    env = dict(os.environ, **({"PYTHONPATH": os.path.abspath(tree)} if tree is not None else {}))
    out = subprocess.run([sys.executable, "-c", TWICE, *ARGV], check=True, capture_output=True, env=env, cwd=tree)
    return float(out.stdout.split()[-1])


def command(tree=None):
    """(CPU seconds, user + system, of the whole command in a fresh process, imports included, as a user runs it;
    what it printed). `tree`: the source tree to run it from (None: the one this script imports)."""
    argv = [sys.executable, "-m", "zerosim.cli.main", *ARGV]
    env = dict(os.environ)
    if tree is not None:  # its package first (`-m` also puts the working directory first: run from the tree)
        env["PYTHONPATH"] = os.path.abspath(tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(argv, check=True, capture_output=True, env=env, cwd=tree).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, out


def quartiles(xs) -> str:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return f"median {q[1]:.2f} s (quartiles {q[0]:.2f}–{q[2]:.2f}; runs {', '.join(f'{x:.2f}' for x in xs)})"


def exhaustive(config):
    """Every configuration the long way: memory measured, and a full simulation of every one that fits."""
    t = time.process_time()
    g, comm = get_gpu(GPU), get_comm_schedule("deepspeed")
    # the planner's: NVLink 4 inside a node, InfiniBand NDR between the 8 nodes (the rings cross them)
    hw = Hardware(g.device, "nvlink4", get_precision("bf16-mixed").compute, inter_link="ib_ndr")
    per_rank, found = GLOBAL // RANKS, []
    for stage, strategy, B in itertools.product((0, 1, 2, 3), ALL_STRATEGIES, divisors(GLOBAL // RANKS)):
        model = MetaLlama.from_config(config, L, **strategy_options(strategy))
        row, _, _ = measure_stage(model, RANKS, stage, "adam", "bf16-mixed", micro_batch=(B, L), comm=comm,
                                  gpus_per_node=PER_NODE)
        need = row["peak"] + sum(o.bytes for o in runtime_overheads(row["peak"], RANKS, stage, None, ALLOCATOR_RESERVE))
        if need <= g.capacity:
            result, _ = meta_step(
                model, RANKS, stage, hw, comm, "bf16-mixed", micro_batch=(B, L), accumulation_steps=per_rank // B,
                gpus_per_node=PER_NODE,
            )
            found.append((stage, strategy, B, result.step_time))
    found.sort(key=lambda r: (r[3], r[0], r[2]))
    return time.process_time() - t, found


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-baseline", action="store_true", help="skip the exhaustive yardstick")
    p.add_argument("--tree", help="another source tree whose command runs in turns with this one's")
    args = p.parse_args()
    config = get_preset("llama-3-70b").config
    print(
        f"zerosim plan: Llama-3-70B, {RANKS} × H100 80GB ({PER_NODE} per node), L = {L}, {GLOBAL} sequences per step; "
        f"BLAS threads {os.environ['OPENBLAS_NUM_THREADS']}; load {os.getloadavg()[0]:.2f}; in turns; CPU seconds"
    )
    ours, base, cli, other, work, other_work = [], [], [], [], [], []
    for i in range(args.repeats):
        ours.append(planner(config))
        cli.append(command())
        work.append(command_work())
        if args.tree:
            other.append(command(args.tree))
            other_work.append(command_work(args.tree))
        if not args.no_baseline and i == 0:
            base.append(exhaustive(config))
    ours_s, top = statistics.median(t for t, _ in ours), ours[0][1][0]
    print(f"  planner alone (imports excluded): {quartiles([t for t, _ in ours])}; top row: ZeRO-{top[0]} {top[1]} "
          f"B = {top[2]}, {top[3]:.2f} s")
    cli_s = statistics.median(t for t, _ in cli)
    print(f"  `zerosim plan`, a fresh process, imports included: {quartiles([t for t, _ in cli])}")
    print(f"  `zerosim plan`, its work alone (a second run in one process): {quartiles(work)}")
    if other:
        print(f"  the same from {args.tree}: {quartiles([t for t, _ in other])}; ratio this / that "
              f"{cli_s / statistics.median(t for t, _ in other):.2f}; the same bytes printed: "
              f"{'yes' if len({out for _, out in cli + other}) == 1 else 'NO'}")
        print(f"  its work alone there: {quartiles(other_work)}; ratio this / that "
              f"{statistics.median(work) / statistics.median(other_work):.2f}")
    if base:
        t, found = base[0]
        # the same configurations, each step time within 1e-12 (the line adds the same durations in another order:
        # tests/test_plan.py), ranked alike but for ties within that (two strategies may time the same)
        full = {b[:3]: b[3] for b in found}
        mine = [(a[:3], a[3]) for a in ours[0][1]]
        same = {k for k, _ in mine} == set(full) and all(abs(t - full[k]) <= 1e-12 * full[k] for k, t in mine) and all(
            full[k] <= full[j] * (1 + 1e-12) for (k, _), (j, _) in zip(mine, mine[1:]))
        print(f"  exhaustive yardstick {t:7.2f} s  ({len(found)} configurations fit)")
        print(f"  the same ranking and step times both ways: {'yes' if same else 'NO'}")
        print(f"  ratio yardstick / planner: {t / ours_s:.1f}x")
    print(f"  planner {'under' if ours_s < TARGET else 'OVER'} the {TARGET:g} s target ({ours_s:.2f} s); the command "
          f"{'within' if cli_s <= COMMAND_TARGET else 'OVER'} the {COMMAND_TARGET:g} s CPU target ({cli_s:.2f} s)")


if __name__ == "__main__":
    main()
