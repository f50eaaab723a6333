"""How long `zerosim plan` takes for Llama-3-70B on 64 H100s, against the same search done the long way.

The work (issue 23): every ZeRO stage × checkpointing strategy × micro-batch dividing the 16 sequences each GPU
takes per step (1,024 sequences of 4,096 tokens on 64 GPUs, 8 per node), the memory of each on the meta backend and
the step time of each that fits an H100 80GB, ranked. zerosim's planner skips the stages whose model states alone
cannot fit, stops each strategy at its first micro-batch that does not fit, reuses the memory run as the first
micro-step and extends the line through one and two micro-steps. The yardstick does what a user would with the
CLI: every configuration measured (`measure_stage`), and every one that fits simulated micro-step by micro-step
(`meta_step` with K micro-steps), then sorted. Both must give the same ranking (checked: the same configurations
in the same order, step times within 1e-12). Measured in turns; median of --repeats for the planner, the
yardstick once per round (it is slow).

    python benchmarks/plan.py [--repeats 3]

Target (issue 23): the planner under 10 s on this machine.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads: one BLAS thread, as the tests run

import argparse
import itertools
import statistics
import subprocess
import sys
import time

from zerosim.analysis.costs import ALLOCATOR_RESERVE, get_gpu, get_preset, measure_stage, runtime_overheads
from zerosim.analysis.planner import divisors, meta_step, plan
from zerosim.analysis.timeline import Hardware
from zerosim.models.gpt import STRATEGIES, strategy_options
from zerosim.models.llama import MetaLlama
from zerosim.parallel.data import get_comm_schedule
from zerosim.precision import get_precision

TARGET = 10.0
RANKS, PER_NODE, GPU, L, GLOBAL = 64, 8, "h100-80gb", 4096, 1024


def planner(config):
    t = time.perf_counter()
    p = plan(config, RANKS, PER_NODE, GPU, L, GLOBAL)
    return time.perf_counter() - t, [(r.stage, r.strategy, r.micro_batch, r.step_s) for r in p.fitting]


def command():
    """The whole command in a fresh process, imports included, as a user runs it."""
    argv = [
        sys.executable,
        "-m",
        "zerosim.cli.main",
        "plan",
        "--model",
        "llama-3-70b",
        "--gpus",
        str(RANKS),
        "--gpus-per-node",
        str(PER_NODE),
        "--gpu",
        GPU,
        "--seq-len",
        str(L),
        "--global-batch",
        str(GLOBAL),
    ]
    t = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - t


def exhaustive(config):
    """Every configuration the long way: memory measured, and a full simulation of every one that fits."""
    t = time.perf_counter()
    g, comm = get_gpu(GPU), get_comm_schedule("deepspeed")
    hw = Hardware(g.device, "ib_ndr", get_precision("bf16-mixed").compute)
    per_rank, found = GLOBAL // RANKS, []
    for stage, strategy, B in itertools.product((0, 1, 2, 3), STRATEGIES, divisors(GLOBAL // RANKS)):
        model = MetaLlama.from_config(config, L, **strategy_options(strategy))
        row, _, _ = measure_stage(model, RANKS, stage, "adam", "bf16-mixed", micro_batch=(B, L), comm=comm)
        need = row["peak"] + sum(o.bytes for o in runtime_overheads(row["peak"], RANKS, stage, None, ALLOCATOR_RESERVE))
        if need <= g.capacity:
            result, _ = meta_step(
                model, RANKS, stage, hw, comm, "bf16-mixed", micro_batch=(B, L), accumulation_steps=per_rank // B
            )
            found.append((stage, strategy, B, result.step_time))
    found.sort(key=lambda r: (r[3], r[0], r[2]))
    return time.perf_counter() - t, found


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-baseline", action="store_true", help="skip the exhaustive yardstick")
    args = p.parse_args()
    config = get_preset("llama-3-70b").config
    print(
        f"zerosim plan: Llama-3-70B, {RANKS} × H100 80GB ({PER_NODE} per node), L = {L}, {GLOBAL} sequences per step; "
        f"BLAS threads {os.environ['OPENBLAS_NUM_THREADS']}; load {os.getloadavg()[0]:.2f}; in turns"
    )
    ours, base, cli = [], [], []
    for i in range(args.repeats):
        ours.append(planner(config))
        cli.append(command())
        if not args.no_baseline and i == 0:
            base.append(exhaustive(config))
    ours_s, top = statistics.median(t for t, _ in ours), ours[0][1][0]
    print(
        f"  planner              {ours_s:7.2f} s  (median of {args.repeats}; runs "
        f"{', '.join(f'{t:.2f}' for t, _ in ours)})  top row: ZeRO-{top[0]} {top[1]} B = {top[2]}, {top[3]:.2f} s"
    )
    print(f"  `zerosim plan`, a fresh process end to end: {statistics.median(cli):.2f} s (median of {args.repeats})")
    if base:
        t, found = base[0]
        same = [(a[:3]) for a in ours[0][1]] == [b[:3] for b in found] and all(
            abs(a[3] - b[3]) <= 1e-12 * b[3] for a, b in zip(ours[0][1], found)
        )
        print(f"  exhaustive yardstick {t:7.2f} s  ({len(found)} configurations fit)")
        print(f"  the same ranking and step times both ways: {'yes' if same else 'NO'}")
        print(f"  ratio yardstick / planner: {t / ours_s:.1f}x")
    worst = max(statistics.median(cli), ours_s)
    print(f"  {'under' if worst < TARGET else 'OVER'} the {TARGET:g} s target ({worst:.2f} s)")


if __name__ == "__main__":
    main()
