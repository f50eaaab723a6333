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
in the same order, step times within 1e-12). Measured in turns (benchmarks/trees.py): median of --repeats for the
planner, the yardstick once, in this process, after the first timed round (it is slow).

The command itself (issue 63: the README's `zerosim plan` at most 1.5 s of CPU): `python -m zerosim.cli.main plan`
with the README's flags in a fresh process, its CPU time (user + system of the process), imports and the
interpreter's start included; its work alone (the command's `main` called again in a process that has run it
before: imports excluded); and the planner's own CPU (`plan` with its defaults, imports excluded). All three are
timed in a worker process of benchmarks/trees.py, which imports the zerosim of its tree and starts the fresh
process from there (`-m` puts the working directory first); the first round warms up, untimed. `--tree DIR` does
the same for another source tree (e.g. a checkout of the commit before), in a worker of its own, in turns with
this one, and says whether the two commands printed the same bytes. The fresh process reads each tree's modules
compiled, as an installed package's users do, from a temporary cache that the untimed first round fills
(trees.py `compiled_child`): under PYTHONDONTWRITEBYTECODE a tree without __pycache__ compiled them in every run
(~0.25 s here) where a tree with one did not.

    python benchmarks/plan.py [--repeats 3] [--no-baseline] [--tree DIR]

Targets: the planner under 10 s on this machine (issue 23); the command at most 1.5 s of CPU (issue 63).
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads: one BLAS thread, as the tests run

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import itertools  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/trees.py, however this file is run
from peers import measured_tree  # noqa: E402
from trees import Side, compared, compiled_child, in_turns, quartiles, rounds, source_tree, started  # noqa: E402

TARGET = 10.0
COMMAND_TARGET = 1.5  # CPU seconds, the whole command (issue 63)
RANKS, PER_NODE, GPU, L, GLOBAL = 64, 8, "h100-80gb", 4096, 1024
ARGV = ["plan", "--model", "llama-3-70b", "--gpus", str(RANKS), "--gpus-per-node", str(PER_NODE), "--gpu", GPU,
        "--seq-len", str(L), "--global-batch", str(GLOBAL)]  # the README's command


def tree_side() -> Side:
    """The three contenders with the zerosim this process imports, for a worker of benchmarks/trees.py (this tree's
    and --tree's alike): "planner", `plan` for the README's job; "command", the README's command in a fresh process
    started from the tree (the worker counts that process's CPU); "work", the command's `main` called here (what it
    prints caught and dropped). Facts, of the last step of each: "rows", the planner's fitting rows (stage,
    strategy, micro-batch, step s); "printed", the bytes the command printed. The zerosim imports wait for the
    worker's build, so that --tree names the tree they come from."""
    from zerosim.analysis.costs import get_preset
    from zerosim.analysis.planner import plan
    from zerosim.cli.main import main

    config, tree, last = get_preset("llama-3-70b").config, measured_tree(), {}
    python, env = compiled_child()  # its bytecode compiled once, by the untimed first round (trees.py)

    def work():
        with contextlib.redirect_stdout(io.StringIO()):
            main(ARGV)

    steps = {
        "planner": lambda: plan(config, RANKS, PER_NODE, GPU, L, GLOBAL),
        "command": lambda: subprocess.run([*python, "-m", "zerosim.cli.main", *ARGV], check=True, env=env,
                                          capture_output=True, cwd=tree),  # -m: the working directory first
        "work": work,
    }
    return Side(steps, after=last.__setitem__, facts={
        "rows": lambda: [(r.stage, r.strategy, r.micro_batch, r.step_s) for r in last["planner"].fitting],
        "printed": lambda: last["command"].stdout,
    })


def spread(xs) -> str:
    """The median of xs, its quartiles and every run, for a line of output."""
    (q1, q3), runs = quartiles(xs), ", ".join(f"{x:.2f}" for x in xs)
    return f"median {statistics.median(xs):.2f} s (quartiles {q1:.2f}–{q3:.2f}; runs {runs})"


def exhaustive(config):
    """Every configuration the long way: memory measured, and a full simulation of every one that fits."""
    from zerosim.analysis.costs import ALLOCATOR_RESERVE, deepspeed_buckets, get_gpu, measure_stage, runtime_overheads
    from zerosim.analysis.planner import divisors, meta_step
    from zerosim.analysis.timeline import Hardware
    from zerosim.models.gpt import ALL_STRATEGIES, strategy_options
    from zerosim.models.llama import MetaLlama
    from zerosim.parallel.data import get_comm_schedule
    from zerosim.precision import get_precision

    t = time.process_time()
    g, comm = get_gpu(GPU), get_comm_schedule("deepspeed")
    # the planner's: NVLink 4 inside a node, InfiniBand NDR between the 8 nodes (the rings cross them)
    hw = Hardware(g.device, "nvlink4", get_precision("bf16-mixed").compute, inter_link="ib_ndr")
    # DeepSpeed's gradient bucket buffers, as the planner's default schedule (DeepSpeed's) allocates them: this
    # yardstick left them out from 2026-11-28, when the planner began counting them, to 2026-11-29, and so said NO:
    # ZeRO-3 block-flash at 8 sequences is 0.13 GB under an H100's 85.52 GB without the buffers' 1 GB, 0.87 GB over
    # with them
    buckets, per_rank, found = deepspeed_buckets(comm, "bf16-mixed"), GLOBAL // RANKS, []
    for stage, strategy, B in itertools.product((0, 1, 2, 3), ALL_STRATEGIES, divisors(GLOBAL // RANKS)):
        model = MetaLlama.from_config(config, L, **strategy_options(strategy))
        row, _, _ = measure_stage(model, RANKS, stage, "adam", "bf16-mixed", micro_batch=(B, L), comm=comm,
                                  gpus_per_node=PER_NODE)
        need = row["peak"] + sum(o.bytes for o in runtime_overheads(row["peak"], RANKS, stage, buckets,
                                                                    ALLOCATOR_RESERVE))
        if need <= g.capacity:
            result, _ = meta_step(
                model, RANKS, stage, hw, comm, "bf16-mixed", micro_batch=(B, L), accumulation_steps=per_rank // B,
                gpus_per_node=PER_NODE,
            )
            found.append((stage, strategy, B, result.step_time))
    found.sort(key=lambda r: (r[3], r[0], r[2]))
    return time.process_time() - t, found


def measure(repeats: int, tree, baseline: bool) -> tuple:
    """({(side, contender): [CPU s of each timed round]}, {side: the tree its worker imported}, this tree's planner
    rows, {every command's printed bytes}, [the exhaustive yardstick's (CPU s, rows)] where `baseline`) for side
    "this" (the zerosim this script imports) and, with `tree`, "that"; every contender of both in one shuffled order
    each round."""
    from zerosim.analysis.costs import get_preset

    sides = {"this": measured_tree(), **({"that": tree} if tree is not None else {})}
    printed, base = set(), []
    with started(sides, "plan", "tree_side") as workers:

        def after_round(round_):
            printed.update(w.fact("printed") for w in workers.values())
            if baseline and round_ == 1:
                base.append(exhaustive(get_preset("llama-3-70b").config))

        cpu = in_turns(workers, repeats, after_round=after_round)
        return cpu, {side: w.tree for side, w in workers.items()}, workers["this"].fact("rows"), printed, base


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=rounds, default=3)
    p.add_argument("--no-baseline", action="store_true", help="skip the exhaustive yardstick")
    p.add_argument("--tree", type=source_tree, help="another source tree whose command runs in turns with this one's")
    args = p.parse_args()
    print(
        f"zerosim plan: Llama-3-70B, {RANKS} × H100 80GB ({PER_NODE} per node), L = {L}, {GLOBAL} sequences per step; "
        f"BLAS threads {os.environ['OPENBLAS_NUM_THREADS']}; load {os.getloadavg()[0]:.2f}; in turns; CPU seconds"
    )
    cpu, seen, rows, printed, base = measure(args.repeats, args.tree, not args.no_baseline)
    ours, cli, work = (cpu["this", name] for name in ("planner", "command", "work"))
    ours_s, cli_s, top = statistics.median(ours), statistics.median(cli), rows[0]
    print(f"  zerosim from {seen['this']} (asked in its worker)")
    print(f"  planner alone (imports excluded): {spread(ours)}; top row: ZeRO-{top[0]} {top[1]} B = {top[2]}, "
          f"{top[3]:.2f} s")
    print(f"  `zerosim plan`, a fresh process, imports included: {spread(cli)}")
    print(f"  `zerosim plan`, its work alone (a later run in one process): {spread(work)}")
    if args.tree is not None:
        ratio = {name: compared(cpu, name) for name in ("planner", "command", "work")}
        print(f"  the same from {seen['that']}: {spread(cpu['that', 'command'])}; ratio this / that "
              f"{ratio['command'][2]:.2f} (rounds {ratio['command'][3][0]:.2f}–{ratio['command'][3][1]:.2f}); the same "
              f"bytes printed: {'yes' if len(printed) == 1 else 'NO'}")
        for name, what in (("work", "its work alone"), ("planner", "the planner alone")):
            print(f"  {what} there: {spread(cpu['that', name])}; ratio this / that {ratio[name][2]:.2f} (rounds "
                  f"{ratio[name][3][0]:.2f}–{ratio[name][3][1]:.2f})")
    if base:
        t, found = base[0]
        # the same configurations, each step time within 1e-12 (the line adds the same durations in another order:
        # tests/test_plan.py), ranked alike but for ties within that (two strategies may time the same)
        full = {b[:3]: b[3] for b in found}
        mine = [(a[:3], a[3]) for a in rows]
        same = {k for k, _ in mine} == set(full) and all(abs(t - full[k]) <= 1e-12 * full[k] for k, t in mine) and all(
            full[k] <= full[j] * (1 + 1e-12) for (k, _), (j, _) in zip(mine, mine[1:]))
        print(f"  exhaustive yardstick {t:7.2f} s  ({len(found)} configurations fit)")
        print(f"  the same ranking and step times both ways: {'yes' if same else 'NO'}")
        print(f"  ratio yardstick / planner: {t / ours_s:.1f}x")
    print(f"  planner {'under' if ours_s < TARGET else 'OVER'} the {TARGET:g} s target ({ours_s:.2f} s); the command "
          f"{'within' if cli_s <= COMMAND_TARGET else 'OVER'} the {COMMAND_TARGET:g} s CPU target ({cli_s:.2f} s)")
    if base and not same:  # a wrong plan is no speed: the run fails (tests/test_benchmarks_run.py runs this script)
        raise SystemExit("the planner and the exhaustive search disagree (above)")


if __name__ == "__main__":
    main()
