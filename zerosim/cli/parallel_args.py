"""The parallel-degree flags `zerosim memory`, `timeline`, `train` and `plan` share, defined once as one argument
group; what they say is one `zerosim.parallel.ParallelSpec`, checked by it in these flags' names:

    --tp T        Megatron's tensor parallelism of degree T beside the ZeRO stage or strategy: each layer's heads,
                  columns and vocabulary cut over T consecutive GPUs (one node's, by torchtitan's mesh order);
                  --ranks stays the number of GPUs and the data-parallel degree is ranks / (T·C), as torchtitan's
                  degrees multiply to the world size
    --sp          with --tp: Megatron's sequence parallelism (norms and residuals on sequence shards; the
                  all-reduces become all-gathers and reduce-scatters along the sequence)
    --tp-layout   with --tp: what a TP rank keeps for backward: "megatron" (each column GEMM's input as its sequence
                  shard, all-gathered again) or "torchtitan" (torch DTensor's all-gathered input; with --kernels eager
                  every tensor torch's eager autograd saves). Default: the framework's, by --comm (torchtitan's for
                  FSDP's schedule, Megatron's otherwise: DeepSpeed runs Megatron-DeepSpeed's TP)
    --async-tp    (timeline) with --tp: the bound of overlapping TP's collectives with the GEMMs they feed
                  (torchtitan's async TP, Megatron's --tp-comm-overlap): no compute waits for them
    --cp C        context parallelism of degree C: each of C GPUs holds 1/C of every sequence, attention's keys and
                  values travelling the CP group (Megatron-Core's --context-parallel-size, torchtitan's
                  context_parallel_degree); ZeRO shards and reduces over dp × cp (torchtitan's "fsdp" mesh)
    --cp-style    with --cp: "ring" (Transformer Engine's p2p: K/V sent hop by hop, each hop's attention merged;
                  Megatron-Core's default --cp-comm-type), "allgather" (the Llama 3 paper's: K/V all-gathered) or
                  "torch" (torch's context_parallel, torchtitan's: K/V all-gathered, merged step by step in fp32)
    --cp-split    with --cp: "zigzag" (each rank chunks p and 2C−1−p, balancing causal work: TE's, torch's head-tail
                  load balancer) or "contiguous"

    --pp P        pipeline parallelism of degree P: the layers cut into P stages (torchtitan's even split), each a
                  block of ranks / P GPUs (pp outermost on the mesh, so stages talk across nodes), the micro-batches
                  driven through the schedule's table; ZeRO shards each stage over its ranks / (T·P) data-parallel
                  ranks (Megatron-Core's --pipeline-model-parallel-size, torchtitan's pipeline_parallel_degree).
                  --accumulation-steps M is the micro-batches per step per data-parallel rank (Megatron's
                  num_microbatches; default P, torchtitan's pipeline_parallel_microbatches default)
    --pp-schedule with --pp: gpipe, 1f1b (the default, torchtitan's), interleaved-1f1b or zero-bubble (torch 2.13's
                  ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble)
    --virtual-stages  with --pp: V stages a rank (interleaved-1f1b and zero-bubble; default 2, torchtitan's; Megatron's
                  --num-virtual-stages-per-pipeline-rank)
    --pp-split    with --pp: where the layers are cut: torchtitan (the default: the embedding and the head each
                  weighing one layer, cut evenly) or megatron (L / (P·V) layers a stage, the embedding on the first,
                  the head on the last; refused where it does not divide, as Megatron-Core asserts)

`plan` takes comma-separated lists of --tp, --cp and --pp degrees, of --pp-schedule schedules and --virtual-stages
counts (every combination tried, those zerosim or the frameworks refuse left out with the reason); the other commands
one value each.
"""

from __future__ import annotations

from zerosim.cli import choices
from zerosim.cli.given import given

FRAMEWORK_LAYOUT = {"fsdp": "torchtitan"}  # --comm -> the TP layout of the framework that runs that schedule
CP_STYLES, CP_SPLITS = choices.CP_STYLES, choices.CP_SPLITS  # the library's tables (the CLI imports no engine at
PP_SCHEDULES, PP_SPLITS = choices.PP_SCHEDULES, choices.PP_SPLITS  # parse time: tests/test_cli_choices.py)


def add_parallel_arguments(p, several: bool = False, async_tp: bool = False) -> None:
    """The group of parallel-degree flags; `several`: --tp, --cp, --pp, --pp-schedule and --virtual-stages take
    comma-separated lists (plan's); `async_tp`: with --async-tp (timeline's)."""
    g = p.add_argument_group("parallelism beside ZeRO (tensor: Megatron's column- and row-parallel layers; context: "
                             "each GPU 1/C of every sequence; pipeline: the layers cut into stages)")
    each = "degrees to try, comma-separated (default 1): " if several else "degree: "
    g.add_argument("--tp", type=str if several else int, default="1" if several else None,
                   metavar="T,..." if several else "T",
                   help=f"tensor-parallel {each}T consecutive GPUs split every layer; --ranks stays the GPU count, "
                        "the data-parallel degree is ranks / (T·C) (default 1)")
    g.add_argument("--sp", action="store_true",
                   help="with --tp: sequence parallelism (norms on sequence shards; all-gather / reduce-scatter "
                        "along the sequence instead of all-reduce)")
    g.add_argument("--tp-layout", choices=choices.TP_LAYOUTS, default=None,
                   help="with --tp: what a TP rank keeps for backward: megatron (each column GEMM's input as its "
                        "sequence shard) or torchtitan (torch DTensor's all-gathered input); default by --comm: "
                        "torchtitan for fsdp, megatron otherwise")
    if async_tp:
        g.add_argument("--async-tp", action="store_true",
                       help="with --tp: TP's collectives overlap the GEMMs they feed, as torchtitan's async TP and "
                            "Megatron's --tp-comm-overlap try to (an upper bound: no compute waits for them)")
    g.add_argument("--cp", type=str if several else int, default="1" if several else None,
                   metavar="C,..." if several else "C",
                   help=f"context-parallel {each}C GPUs each hold 1/C of every sequence (its length a multiple of "
                        "2·C zigzag, C contiguous); ZeRO shards over dp × cp (default 1)")
    g.add_argument("--cp-style", choices=CP_STYLES, default=None,
                   help="with --cp: ring (K/V sent round the CP group hop by hop, Transformer Engine's p2p; the "
                        "default), allgather (K/V all-gathered, the Llama 3 paper's) or torch (torch's "
                        "context_parallel as torchtitan runs it: K/V all-gathered, each step merged in fp32, dK/dV "
                        "sent round in fp32)")
    g.add_argument("--cp-split", choices=CP_SPLITS, default=None,
                   help="with --cp: zigzag (rank p holds chunks p and 2C−1−p, balancing causal work; the default) or "
                        "contiguous")
    g.add_argument("--pp", type=str if several else int, default="1" if several else None,
                   metavar="P,..." if several else "P",
                   help=f"pipeline-parallel {each}the layers cut into P stages of ranks / P GPUs each"
                        + ("; K is the micro-batches a step on each data-parallel rank" if several else
                           "; --accumulation-steps is the micro-batches per step per data-parallel rank (default P) "
                           "(default 1)"))
    g.add_argument("--pp-schedule", type=str if several else None, choices=None if several else PP_SCHEDULES,
                   default=None, metavar="S,..." if several else None,
                   help="with --pp: " + ("schedules to try, comma-separated: " if several else "")
                        + f"{', '.join(PP_SCHEDULES)} (torch's ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, "
                        "ScheduleInterleavedZeroBubble; default 1f1b, torchtitan's)")
    g.add_argument("--virtual-stages", type=str if several else int, default=None, metavar="V,..." if several else "V",
                   help="with --pp: stages a rank holds" + (", comma-separated" if several else "")
                        + " (interleaved-1f1b and zero-bubble; default 2, torchtitan's; 1 for gpipe and 1f1b)")
    g.add_argument("--pp-split", choices=PP_SPLITS, default=None,
                   help="with --pp: where the layers are cut: torchtitan (the default: the embedding and the head each "
                        "weighing one layer, cut evenly) or megatron (L / (P·V) layers a stage, refused where it does "
                        "not divide)")


def layout_of(args) -> str:
    """--tp-layout, or the layout of the framework --comm names (FRAMEWORK_LAYOUT; Megatron's otherwise)."""
    layout = getattr(args, "tp_layout", None)
    return layout if layout is not None else FRAMEWORK_LAYOUT.get(getattr(args, "comm", None), "megatron")


def spec_of(args, ranks: int | None, ranks_flag: str = "--ranks"):
    """The ParallelSpec the flags say, checked in their names against the `ranks` GPUs (None: not yet known);
    --tp-layout left out takes the framework's by --comm (layout_of)."""
    from dataclasses import replace

    from zerosim.parallel import ParallelSpec

    tp, cp = _one(getattr(args, "tp", None), "--tp"), _one(getattr(args, "cp", None), "--cp")
    pp = _one(getattr(args, "pp", None), "--pp")
    options = {"sp": bool(getattr(args, "sp", False)), "tp_layout": getattr(args, "tp_layout", None),
               "async_tp": bool(getattr(args, "async_tp", False)), "cp_style": getattr(args, "cp_style", None),
               "cp_split": getattr(args, "cp_split", None), "pp_schedule": getattr(args, "pp_schedule", None),
               "virtual_stages": getattr(args, "virtual_stages", None), "pp_split": getattr(args, "pp_split", None)}
    chosen = {k for k, v in options.items() if given(v)}
    asked = ParallelSpec(tp=tp, cp=cp, pp=pp, **{k: v for k, v in options.items() if v is not None})
    asked.check(ranks, _names(ranks_flag), chosen)
    _check_megatron_kernels(args, tp)
    return replace(asked, tp_layout=layout_of(args) if tp > 1 else None)


def _check_megatron_kernels(args, tp: int) -> None:
    """Refuse --kernels or --loss other than Megatron's beside --tp `tp` > 1 (a degree, or plan's largest) in
    Megatron's layout, where they were taken and never read (parallel/tensor/_meta.py keeps Megatron's tensors)."""
    chosen = [f"{flag} {getattr(args, name)}" for flag, name, megatrons in (("--kernels", "kernels", "fused"),
                                                                           ("--loss", "loss", "probabilities"))
              if getattr(args, name, None) not in (None, megatrons)]
    if tp > 1 and layout_of(args) == "megatron" and chosen:
        raise ValueError(f"{' and '.join(chosen)}: beside --tp {tp} in Megatron's layout every layer runs Megatron's "
                         "own fused kernels (--kernels fused) and the loss its vocabulary-parallel cross-entropy, the "
                         "fp32 softmax of the rank's V/T columns (--loss probabilities); torch's eager kernels and "
                         "other losses run in torchtitan's layout: add --tp-layout torchtitan, or drop them")


def _names(ranks_flag: str) -> dict:
    from zerosim.parallel import FLAGS

    return {**FLAGS, "world_size": ranks_flag}


def _one(value, flag: str) -> int:
    """A degree flag's value: 1 when not given (the other commands take one integer)."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{flag} must be a positive integer, got {value!r}")
    return value


def micro_batches_of(args) -> int:
    """M, the micro-batches per step per data-parallel rank: --accumulation-steps, or beside --pp P the P of
    torchtitan's default (`pipeline_parallel_microbatches or parallel_dims.pp`, parallelisms/pipeline_llama.py at
    9dec370), else 1."""
    steps = getattr(args, "accumulation_steps", None)
    if steps is not None:
        return steps
    pp = getattr(args, "pp", None)
    return pp if isinstance(pp, int) and not isinstance(pp, bool) and pp > 1 else 1


WIRE_FLAGS = "--zero-quantized-weights, --fp8-all-gather and --zero-quantized-gradients"  # ZeRO++'s, torchao's


def refuse_beside_pipeline(spec, strategies: tuple, wire) -> None:
    """With --pp: a --strategy for many nodes or ZeRO++'s quantized collectives (`wire`: --zero-quantized-weights,
    --fp8-all-gather, --zero-quantized-gradients) beside it, refused by name."""
    if spec.pp == 1:
        return
    if strategies:
        raise ValueError("--strategy beside --pp is not modelled: a pipeline's stages run the flat ZeRO stages 0-3 "
                         "(Megatron's distributed optimizer; torchtitan's FSDP: ZeRO-3 with --comm fsdp, which runs "
                         "no_reshard_no_sync beside --pp)")
    if wire is not None:
        raise ValueError(f"{WIRE_FLAGS} beside --pp are "
                         "not modelled: ZeRO++'s and torchao's quantized collectives run over every rank, not a "
                         "stage's")


def refuse_beside(spec, ranks: int, strategies: tuple, wire, clip_grad=None) -> None:
    """What is refused beside --tp, --cp and --pp, in the flags' words, before any work: with --pp a --strategy for
    many nodes and ZeRO++'s quantized collectives (`refuse_beside_pipeline`; its clipping: `check_pipeline`); beside
    --tp or --cp those collectives (`wire`) and clipping (`clip_grad`: a DeepSpeed config's gradient_clipping), by the
    engine's own rule (parallel/data/multinode `refuse_beside`) on the `ranks` GPUs."""
    refuse_beside_pipeline(spec, strategies, wire)
    if spec.pp == 1:
        from zerosim.parallel.data.multinode import refuse_beside as rule

        rule(spec.dims(ranks), clip_grad, wire, f"the DeepSpeed config's gradient_clipping ({clip_grad})",
             f"the quantized collectives {WIRE_FLAGS} ask for")


def beside_pipeline(spec, work, stages, recipe=None) -> tuple:
    """(the ZeRO stages of `stages` whose framework runs them beside --pp, {"stages", "why"} of those left out or
    None): DeepSpeed's schedule runs ZeRO-0/1 only (parallel.pipeline refused_beside); a DeepSpeed config's own stage
    is never left out (check_pipeline refuses it, naming the config's stage). Without --pp, `stages` as given."""
    from zerosim.parallel.pipeline import refused_beside

    if spec.pp == 1 or work.ds is not None:
        return tuple(stages), None
    whose = {st: refused_beside(st, work.precision, recipe, work.comm) for st in stages}
    kept = tuple(st for st in stages if whose[st] is None)
    if not kept or len(kept) == len(stages):
        return tuple(stages), None  # all kept, or none: check_pipeline says why
    out = [st for st in stages if whose[st] is not None]
    return kept, {"stages": out, "why": f"{whose[out[0]]} beside a pipeline: DeepSpeed's pipeline engine runs ZeRO "
                  "below stage 2 only (DeepSpeed 0.19.8 runtime/pipe/engine.py, PipelineEngine.__init__); --comm "
                  "fsdp runs ZeRO-3 beside it as torchtitan does"}


def check_pipeline(spec, work, stages, recipe=None, ranks_flag: str = "--ranks") -> None:
    """With --pp: the schedule's table for the run's micro-batches (`work.accumulation`, --accumulation-steps or a
    DeepSpeed config's) and what is refused beside a pipeline at each ZeRO stage of `stages` with the run's precision,
    `recipe` (None: a DeepSpeed config's, else the policy's) and schedule, in the flags' words
    (ParallelSpec.pipeline_check); clipping (a DeepSpeed config's gradient_clipping) is not modelled beside it."""
    if spec.pp == 1:
        return
    if recipe is None and work.ds is not None:  # a DeepSpeed config: DeepSpeed's pipeline engine, its recipe
        recipe = work.ds.recipe
    for stage in stages:
        spec.pipeline_check(work.accumulation, stage, work.precision, recipe, work.comm, _names(ranks_flag))
    if work.clip_grad is not None:
        raise ValueError(f"clipping (gradient_clipping {work.clip_grad}) beside --pp {spec.pp}: the gradient's norm "
                         "spans every stage (Megatron and DeepSpeed all-reduce it over the pipeline group); not "
                         "modelled yet")


def tensor_of(args, ranks: int) -> tuple:
    """(T, SP) from --tp and --sp, every parallel flag checked against the GPUs (spec_of)."""
    spec = spec_of(args, ranks)
    return spec.tp, spec.sp


def degrees(text: str, flag: str) -> tuple:
    """A list-valued degree flag of plan's ("1,2,4"): positive integers, each once, in the order given."""
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated positive integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{flag} degrees must be at least 1, got {text!r}")
    return tuple(dict.fromkeys(values))


def specs_of(args, ranks: int, ranks_flag: str = "--gpus") -> tuple:
    """plan's ((ParallelSpec, None) or ({degree: value}, why), ...): one per combination of its --tp, --cp and --pp
    lists, and beside a degree of --pp above 1 of its --pp-schedule and --virtual-stages lists (the virtual stages of
    the schedules that run several a rank), in the product's order (the degrees as data: a further degree is one more
    list). A combination the spec refuses (SP beside CP or PP, CP beside PP, degrees that do not divide the GPUs) is
    left out with the reason; --sp, --tp-layout, --cp-style, --cp-split, --pp-schedule and --virtual-stages apply
    where their degree is above 1, and each needs one of its degrees above 1."""
    from itertools import product

    lists = {"tp": degrees(args.tp, "--tp"), "cp": degrees(args.cp, "--cp"), "pp": degrees(args.pp, "--pp")}
    for flag, degree, what in (("--sp", "tp", "cuts the sequence over a TP group"),
                               ("--tp-layout", "tp", "says what a TP rank keeps"),
                               ("--cp-style", "cp", "says how the keys and values travel a CP group"),
                               ("--cp-split", "cp", "says how a sequence is cut over a CP group"),
                               ("--pp-schedule", "pp", "says in which order a pipeline runs its micro-batches"),
                               ("--virtual-stages", "pp", "says how many stages each pipeline rank holds"),
                               ("--pp-split", "pp", "says where the layers are cut into stages")):
        if given(getattr(args, flag[2:].replace("-", "_"), None)) and max(lists[degree]) == 1:  # "" too
            raise ValueError(f"{flag} {what}: give --{degree} degrees above 1 with it")
    _check_megatron_kernels(args, max(lists["tp"]))  # every row of the plan is timed with one kernels choice
    # read (and the pipeline's schedules imported) only where a --pp degree is above 1: the flags that need one were
    # refused above without it
    pipelines = _pipelines(args) if max(lists["pp"]) > 1 else ()
    out = []
    for combo in product(*lists.values()):
        chosen = dict(zip(lists, combo))
        for schedule, virtual in pipelines if chosen["pp"] > 1 else ((None, None),):
            asked = chosen if schedule is None else {**chosen, "pp_schedule": schedule, "virtual_stages": virtual}
            try:
                out.append((_plan_spec(args, ranks, ranks_flag, **asked), None))
            except ValueError as why:
                out.append((asked, str(why)))
    return tuple(out)


def _pipelines(args) -> tuple:
    """((schedule, virtual stages or None), ...) of plan's --pp-schedule and --virtual-stages lists: each schedule
    that runs several stages a rank with each count (None: its default), one that runs one with None."""
    from zerosim.parallel import ParallelSpec
    from zerosim.parallel.pipeline import SCHEDULES

    text = getattr(args, "pp_schedule", None)
    text = ParallelSpec().pp_schedule if text is None else text  # "" is given: refused below as no schedule
    schedules = tuple(dict.fromkeys(x.strip() for x in text.split(",")))
    unknown = [x for x in schedules if x not in SCHEDULES]
    if unknown:
        raise ValueError(f"--pp-schedule takes comma-separated schedules of {', '.join(SCHEDULES)}; got {unknown[0]!r}")
    counts = getattr(args, "virtual_stages", None)
    virtuals = (None,) if counts is None else degrees(counts, "--virtual-stages")
    looped = [x for x in schedules if SCHEDULES[x].default_virtual > 1]
    if counts is not None and not looped:
        raise ValueError(f"--virtual-stages {counts} counts the stages a rank of interleaved-1f1b or zero-bubble "
                         f"holds; --pp-schedule {text} runs one a rank: add one of those schedules")
    return tuple((x, v) for x in schedules for v in (virtuals if x in looped else (None,)))


def _plan_spec(args, ranks, ranks_flag, tp: int, cp: int, pp: int = 1, pp_schedule: str | None = None,
               virtual_stages: int | None = None):
    """One combination's spec: the options given where their degree is above 1 (--sp beside TP only), ParallelSpec's
    defaults for the rest."""
    from zerosim.parallel import ParallelSpec

    given = {"cp_style": args.cp_style, "cp_split": args.cp_split} if cp > 1 else {}
    if pp > 1:
        given |= {"pp_schedule": pp_schedule, "pp_split": getattr(args, "pp_split", None)}
    spec = ParallelSpec(tp=tp, sp=args.sp and tp > 1, tp_layout=layout_of(args) if tp > 1 else None, cp=cp, pp=pp,
                        virtual_stages=virtual_stages, **{k: v for k, v in given.items() if v is not None})
    return spec.check(ranks, _names(ranks_flag))
