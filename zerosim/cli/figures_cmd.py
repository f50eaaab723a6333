"""Draw the figures the docs and the notebooks show, from live runs, into figures/ (one PNG each, or SVG / PDF).

    zerosim figures                          # every figure below
    zerosim figures --only ring_steps        # one of them (repeat --only for several)
    zerosim figures --model gpt3-175b --ranks 1024 --out /tmp/figs   # memory_by_stage for another model
    zerosim figures --format svg --style slides --out slides   # for a lecture: large text, one stage per frame
    zerosim figures --jobs auto              # a figure a core: the same files in less wall time

    memory_by_stage   per-rank model states by stage, stacked by kind (the ZeRO paper's Figure 1): the meta
                      backend's ledgers after one step, for Ψ = 7.5B on N = 64 with Adam unless told otherwise;
                      --log draws points on a log axis instead (stacked bars on a log axis would mislead)
    peak_by_stage     an MLP's rank 0 at the moment of its peak, by kind, stage by stage
    spacing           each format's spacing against magnitude; the lost 1e-5 update (seed 000)
    dataflow          the mixed-precision loop with the casts where the run made them (seeds 000/002)
    ownership         who holds which W, G and OS on 4 GPUs, per stage, from the ledgers (seed 001)
    ring_steps        a ring all-reduce on 4 ranks, chunk by chunk, rounding marked (seed 001)
    zero3_sequence    ZeRO-3's per-layer gather / compute / free / reduce-scatter on seed 004 (seeds 003/004)
    timeline          one ZeRO-3 step of Llama-7B on 64 ranks over InfiniBand, without and with prefetch (seed 003)
    timeline_sweep    step time and exposed communication vs N, GPT-3 175B, stages 1-3 (seed 003's "past 512"); the
                      configurations that do not fit an H100 are marked, not drawn as steps that ran
    l_squared         one layer's activations against L at seed 001's 7B shape: P (B·H·L²) overtakes the rest (seed 001)
    activation_strategies  each checkpointing strategy's peak activations and extra FLOPs at the 7B shape (seed 001)
    will_it_fit       Llama-3-8B on 8 GPUs: one rank's peak by stage and strategy, estimates on top, against 3 GPUs
    plan              zerosim plan's answer for Llama-3-70B on 64 H100s: memory by kind against the GPU, step times
    many_nodes        GPT-3 175B on 1,024 H100s, 8 per node: FULL_SHARD, hpZ, MiCS, HSDP by shard group — memory,
                      bytes per link tier, step time (an engineer choosing between HSDP and hpZ)
    tier_timeline     one step of GPT-3 175B on 1,024 H100s, 8 per node, rank 0: compute, and each collective on the
                      link it ran over (NVLink or InfiniBand) — FULL_SHARD, HSDP and MiCS (S = 8), hpZ (S' = 8)
    mesh_ownership    who holds which shard of W, G, OS (and hpZ's secondary W) on 2 nodes × 4 GPUs: FULL_SHARD,
                      HSDP, MiCS, hpZ, from one step's ledgers and layouts
    tensor_mesh       the mesh with a TP axis: tp 2 x dp 4 on 4 nodes of 2, which GPU holds which TP slice and which
                      ZeRO shard of it, and the bytes each sent on NVLink (TP) and across nodes (ZeRO), from one step
"""

from __future__ import annotations

import contextlib
import os
import sys

from zerosim.cli.jobs_args import add_jobs_argument
from zerosim.cli.model_args import add_model_arguments, model_from_args

HELP = "draw every seed figure (PNG) from live runs into figures/"
PAPER_FIG1 = (120, 31.4, 16.6, 1.9)  # Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B, N = 64, K = 12


def _memory_by_stage(args):
    from zerosim.analysis.costs import measure_by_stage
    from zerosim.viz import memory_by_stage_figure

    model = model_from_args(args)
    stages = measure_by_stage(model, args.ranks, args.optimizer, args.precision, show_progress=sys.stderr.isatty())
    paper = model.num_params == 7_500_000_000 and args.ranks == 64 and args.optimizer == "adam"
    title = (f"Per-rank memory by ZeRO stage: Ψ = {model.num_params / 1e9:.4g}B ({model.name}), N = {args.ranks}, "
             f"{args.optimizer}, {args.precision}\nmeasured by the meta backend's ledgers after one step")
    return memory_by_stage_figure(stages, title=title, printed=PAPER_FIG1 if paper else None, log=args.log)


def _peak_by_stage(args):
    from zerosim.viz import mlp_runs, peak_by_stage_figure

    runs = mlp_runs()
    return peak_by_stage_figure(runs, title="MLP [32, 256, 256, 256, 8] on 4 ranks, bf16-mixed, Adam:\n"
                                            "what rank 0 holds at the moment of its peak").figure


def _spacing(args):
    from zerosim.viz import spacing_figure

    return spacing_figure().figure


def _dataflow(args):
    from zerosim.viz import dataflow_figure

    return dataflow_figure()


def _ownership(args):
    from zerosim.viz import ownership_figure

    return ownership_figure()


def _ring_steps(args):
    from zerosim.viz import ring_steps_figure

    return ring_steps_figure()


def gathers_against_seed_003() -> tuple:
    """(note, counts): seed 003's "2·L − 1 additional all_gather calls w.r.t. ZeRO-2" against seed 004's replay, the
    all-gathers counted from the traces of stages 2 and 3, without and with activation checkpointing."""
    from zerosim.cluster import Call
    from zerosim.replay import replay_live

    def all_gathers(stage, checkpoint):
        engine, _ = replay_live(stage=stage, checkpoint=checkpoint)
        return sum(c.collective == "all_gather" for c in engine.cluster.trace.of_type(Call))

    n = {(s, c): all_gathers(s, c) for s in (2, 3) for c in (False, True)}
    net = replay_live(stage=3)[0].model
    layers = sum(b > a for a, b in map(net.layer_window, range(len(net.layers))))  # the layers holding weights
    note = (f"{n[3, True]} all-gathers: each of the L = {layers} layers in forward and in backward (2·L = "
            f"{n[3, False]}), "
            f"and {n[3, True] - n[3, False]} more for the recompute. Seed 003's \"2·L − 1 additional all_gathers "
            "w.r.t. "
            f"ZeRO-2\" counts calls beyond ZeRO-2's {n[2, False]} all-gather after the update, without checkpointing: "
            f"{n[3, False]} − {n[2, False]} = {n[3, False] - n[2, False]}")
    return note, n


def _zero3_sequence(args):
    import textwrap

    from zerosim.replay import replay_live
    from zerosim.viz import zero3_figure

    engine, _ = replay_live(stage=3)
    ax = zero3_figure(engine.cluster.trace, title="Seed 004 at ZeRO-3 on GPU 0: every use of a layer gathers it, "
                                                 "and frees it right after")
    note, _ = gathers_against_seed_003()
    ax.set_xlabel(ax.get_xlabel() + "\n" + textwrap.fill(note, 140), fontsize=9)
    ax.figure.tight_layout()
    return ax.figure


def _timeline(args):
    from zerosim.analysis.costs import get_preset
    from zerosim.analysis.planner import meta_step
    from zerosim.analysis.timeline import Hardware
    from zerosim.models.meta import MetaModel
    from zerosim.parallel.data import CommSchedule
    from zerosim.viz import timelines_figure

    llama, ib = MetaModel.from_preset(get_preset("llama-7b"), unit="block"), Hardware("h100", "ib_ndr", "fp16")
    runs = {}
    for name, comm in (
        ("no prefetch: each unit gathered right before its use", None),
        ("FSDP: one unit prefetched ahead, forward and backward", CommSchedule.fsdp(forward_prefetch=True)),
    ):
        result, _ = meta_step(llama, 64, 3, ib, comm, tokens=16384)
        runs[f"{name}: step {result.step_time:.2f} s, exposed {result.exposed_comm[0]:.2f} s"] = result
    return timelines_figure(runs, title="Llama-7B, ZeRO-3, 64 ranks (rank 0 shown), H100 over InfiniBand NDR, 16,384 "
                                        "tokens per rank", zoom_units=4)


def _timeline_sweep(args):
    from zerosim.analysis.costs import ALLOCATOR_RESERVE, get_gpu, get_preset
    from zerosim.analysis.planner import sweep
    from zerosim.analysis.reports import judge
    from zerosim.models.meta import MetaModel
    from zerosim.parallel.data import CommSchedule
    from zerosim.viz import sweep_figure

    gpt3 = MetaModel.from_preset(get_preset("gpt3-175b"), unit="block")
    rows = sweep(
        gpt3, (64, 128, 256, 512, 1024, 2048, 4096), comm=CommSchedule.fsdp(forward_prefetch=True), tokens=20480
    )
    gpu = get_gpu("h100-80gb")  # ZeRO-1/2 need ~740 / ~380 GB per rank here: they are marked, not drawn as steps
    fits = [judge(r.peak, r.stage, r.ranks, gpu, ALLOCATOR_RESERVE)["fits"] for r in rows]
    return sweep_figure(rows, title="GPT-3 175B in blocks, 20,480 tokens per rank, H100, one unit prefetched (FSDP)",
                        fits=fits, gpu=gpu.name)


SEED001_7B = dict(vocab=50257, d_model=4096, n_heads=32, n_layers=32)  # seed 001 §6's "7B-class" shape; V: GPT-2's


def _l_squared(args):
    from zerosim.analysis.costs import measure_activations
    from zerosim.models import GPT
    from zerosim.models.gpt import MetaGPT
    from zerosim.viz import l_squared_figure

    rows = [
        (L, measure_activations(MetaGPT(GPT(seq_len=L, **SEED001_7B)), 4, L).per_block)
        for L in (512, 1024, 2048, 4096, 8192)
    ]
    return l_squared_figure(rows, title="What one layer saves, seed 001's 7B shape (d 4096, H 32), B = 4, fp16:\n"
                                        "measured by the meta backend's ledgers").figure


def _activation_strategies(args):
    from zerosim.analysis.costs import get_gpu, strategy_costs
    from zerosim.viz import strategies_figure

    gpu = get_gpu("h100-80gb")
    return strategies_figure(strategy_costs(4, 2048, **SEED001_7B), capacity=gpu.capacity, gpu=gpu.name,
                             title="Seed 001's checkpointing strategies at its 7B shape (32 layers), B = 4, L = 2048, "
                                   "fp16: "
                                   "one rank's ledger and compute events")


def _will_it_fit(args):
    from zerosim.analysis.costs import get_gpu, measure_by_stage
    from zerosim.models.gpt import strategy_options
    from zerosim.models.hf import read_hf_config, shipped_config
    from zerosim.models.llama import MetaLlama
    from zerosim.viz import fit_figure

    config = read_hf_config(shipped_config("llama-3-8b"))
    runs = {f"checkpoint {s!r}": measure_by_stage(MetaLlama.from_config(config, 4096, **strategy_options(s)), 8,
                                                  "adam", "bf16-mixed", micro_batch=(1, 4096))
            for s in ("none", "flash", "block")}
    return fit_figure(runs, [get_gpu(g) for g in ("rtx3090", "a100-80gb", "h200")], 8,
                      title="Llama-3-8B on 8 GPUs: one rank at its peak (B = 1, L = 4,096, bf16-mixed, Adam)")


def _plan(args):
    from zerosim.analysis.costs import EFFICIENCY_PRESETS as PRESETS
    from zerosim.analysis.costs import get_preset
    from zerosim.analysis.planner import plan
    from zerosim.analysis.timeline import TimeModel
    from zerosim.viz import plan_figure

    # what `zerosim plan` prints for it by default: eager PyTorch's kernels and loss, the eager efficiency preset
    p = plan(get_preset("llama-3-70b").config, 64, 8, "h100-80gb", 4096, 1024, time_model=TimeModel(PRESETS["eager"]),
             kernels="eager", loss="eager")
    return plan_figure(p, top=8)


# the figures that take longest to draw (0.7-1.2 s of CPU each, 2026-11-27): with --jobs, handed to workers first
LONGEST = ("timeline_sweep", "plan", "many_nodes", "pipeline_schedules")
STAGED = {"memory_by_stage": 4, "peak_by_stage": 4}  # figures whose first axes draw stage i at x = i: slide frames
MANY_NODES = (("full_shard", None), ("hpz", 8), ("mics", 64), ("hsdp", 32), ("hsdp", 64), ("hsdp", 128))


def _many_nodes(args):
    from zerosim.analysis.costs import get_gpu, get_preset
    from zerosim.analysis.planner import strategy_step
    from zerosim.models.meta import MetaModel
    from zerosim.parallel.data import CommSchedule
    from zerosim.viz import many_nodes_figure

    gpt3, gpu, comm = MetaModel.from_preset(get_preset("gpt3-175b"), unit="block"), get_gpu("h100-80gb"), \
        CommSchedule.fsdp(forward_prefetch=True)
    rows = [strategy_step(gpt3, 1024, name, 8, group, comm=comm, tokens=20480) for name, group in MANY_NODES]
    return many_nodes_figure(rows, capacity=gpu.capacity, gpu=gpu.name,
                             title="GPT-3 175B on 1,024 H100s, 8 per node: 20,480 tokens per rank, one unit "
                                   "prefetched; each strategy with its framework's recipe")


TIER_TIMELINE = (("FULL_SHARD: every ring spans all 1,024 GPUs", "full_shard", None),
                 ("HSDP, S = 8: shard within a node, all-reduce across", "hsdp", 8),
                 ("MiCS, S = 8: as HSDP, the all-reduce at the accumulation boundary", "mics", 8),
                 ("hpZ, S' = 8: forward gathers over the world, backward's within the node", "hpz", 8))


def _tier_timeline(args):
    from zerosim.analysis.costs import get_preset
    from zerosim.analysis.planner import strategy_timeline
    from zerosim.models.meta import MetaModel
    from zerosim.parallel.data import CommSchedule
    from zerosim.viz import tier_timeline_figure

    gpt3, comm = MetaModel.from_preset(get_preset("gpt3-175b"), unit="block"), CommSchedule.fsdp(forward_prefetch=True)
    runs = {label: strategy_timeline(gpt3, 1024, name, 8, group, comm=comm, tokens=20480)[0]
            for label, name, group in TIER_TIMELINE}
    return tier_timeline_figure(runs, title="GPT-3 175B on 1,024 H100s, 8 per node (NVLink within, InfiniBand NDR "
                                            "across): 20,480 tokens per rank, one unit prefetched")


def _mesh_ownership(args):
    from zerosim.viz import mesh_ownership_figure

    return mesh_ownership_figure()


def _tensor_mesh(args):
    from zerosim.viz import tensor_mesh_figure

    return tensor_mesh_figure()


def _pipeline_schedules(args):
    from zerosim.viz import schedule_figure

    return schedule_figure()


FIGURES = {  # name -> how to draw it; each is written to <out>/<name>.png
    "memory_by_stage": _memory_by_stage,
    "peak_by_stage": _peak_by_stage,
    "spacing": _spacing,
    "dataflow": _dataflow,
    "ownership": _ownership,
    "ring_steps": _ring_steps,
    "zero3_sequence": _zero3_sequence,
    "timeline": _timeline,
    "timeline_sweep": _timeline_sweep,
    "l_squared": _l_squared,
    "activation_strategies": _activation_strategies,
    "will_it_fit": _will_it_fit,
    "plan": _plan,
    "many_nodes": _many_nodes,
    "mesh_ownership": _mesh_ownership,
    "tensor_mesh": _tensor_mesh,
    "tier_timeline": _tier_timeline,
    "pipeline_schedules": _pipeline_schedules,
}


def add_arguments(p) -> None:
    add_model_arguments(p)
    p.add_argument("--out", default="figures", help="directory to write into (default figures/)")
    p.add_argument("--only", action="append", choices=sorted(FIGURES), metavar="NAME",
                   help=f"draw only this figure (repeatable): {', '.join(FIGURES)}")
    p.add_argument("--log", action="store_true", help="memory_by_stage: points on a logarithmic axis instead of "
                                                      "stacked bars")
    p.add_argument("--format", choices=("png", "svg", "pdf"), default="png", help="file format (default png)")
    p.add_argument("--style", choices=("paper", "slides"), default="paper",
                   help="slides: text of 14 points or more (kept as text in SVG/PDF), and a figure with stages also "
                        "as one frame per stage, NAME_stage0 .. NAME_stage3")
    add_jobs_argument(p, "each drawing a figure")


def run(args) -> int:
    import matplotlib

    matplotlib.use("Agg")  # this command writes files; the figure functions themselves never pick a backend
    from zerosim.analysis.planner import in_order
    from zerosim.cli.jobs_args import jobs_from_args
    from zerosim.outputs import check_folder, write_atomic

    names = args.only or list(FIGURES)
    jobs = jobs_from_args(args)
    _check_model_flags(args, names)
    check_folder(args.out, "--out")  # before drawing (zerosim/outputs.py)
    if jobs > 1:  # pyplot and its fonts loaded once, here, for every worker forked from this process
        import matplotlib.pyplot  # noqa: F401
    longest = [i for i, name in enumerate(names) if name in LONGEST]
    for name, (files, frames) in zip(names, in_order(lambda i: _drawn(names[i], args), len(names), jobs, longest)):
        for k, (file, data) in enumerate(files):  # drawn here or on a worker; every file written here
            path = write_atomic(os.path.join(args.out, file), lambda tmp: _write_bytes(tmp, data), "--out")
            if not k:
                print(f"wrote {path}")
        if frames:
            print(f"  and {STAGED[name]} frames, one stage more each: {name}_stage0 .. {name}_stage{frames - 1}")
    return 0


MODEL_FLAGS = ("params", "model", "config", "layers", "ranks", "optimizer", "precision", "unit", "log")


def _check_model_flags(args, names) -> None:
    """The model's flags (MODEL_FLAGS) size memory_by_stage alone: read them before any figure is drawn or written,
    and refuse them where --only leaves that figure out (they would change nothing)."""
    if "memory_by_stage" in names:
        model_from_args(args)  # a bad value refused here, not after the figures before it were written
        return
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    defaults = parser.parse_args([])
    given = [f"--{name}" for name in MODEL_FLAGS if getattr(args, name) != getattr(defaults, name)]
    if given:
        raise ValueError(f"{', '.join(given)} only change(s) memory_by_stage, which --only leaves out: add --only "
                         "memory_by_stage, or drop them")


def _drawn(name: str, args) -> tuple:
    """(((file name, its bytes), ...), the stage frames among them): figure `name` in `args.format`, and with the
    slides style its frames (NAME_stage0 ..), each saved to bytes for `run` to write (with --jobs, on a worker)."""
    import io

    import matplotlib.pyplot as plt

    from zerosim.viz import enlarge_text, slides_style, stage_frames

    def saved(figure, **options) -> bytes:
        out = io.BytesIO()
        figure.savefig(out, format=args.format, **options)
        return out.getvalue()

    slides = args.style == "slides"
    with slides_style() if slides else contextlib.nullcontext():
        fig = FIGURES[name](args)
        if slides:
            enlarge_text(fig)
        files = [(f"{name}.{args.format}", saved(fig, **({"bbox_inches": "tight"} if slides else {})))]
        if slides and name in STAGED and not (args.log and name == "memory_by_stage"):  # --log draws points
            files += [(f"{name}_stage{k}.{args.format}", saved(frame, bbox_inches="tight"))
                      for k, frame in stage_frames(fig, STAGED[name])]
    plt.close(fig)
    return files, len(files) - 1


def _write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
