"""The flags `zerosim memory`, `timeline`, `train` and `plan` share for tensor parallelism:

    --tp T      Megatron's tensor parallelism of degree T beside the ZeRO stage or strategy: each layer's heads,
                columns and vocabulary cut over T consecutive GPUs (one node's, by torchtitan's mesh order);
                --ranks stays the number of GPUs and the data-parallel degree is ranks / T, as torchtitan's
                degrees multiply to the world size
    --sp        with --tp: Megatron's sequence parallelism (norms and residuals on sequence shards; the
                all-reduces become all-gathers and reduce-scatters along the sequence)
    --async-tp  (timeline) with --tp: the bound of overlapping TP's collectives with the GEMMs they feed
                (torchtitan's async TP, Megatron's --tp-comm-overlap): no compute waits for them
    --tp-layout with --tp: what a TP rank keeps for backward: "megatron" (each column GEMM's input as its sequence
                shard, all-gathered again) or "torchtitan" (torch DTensor's all-gathered input; with --kernels eager
                every tensor torch's eager autograd saves). Default: the framework's, by --comm (torchtitan's for
                FSDP's schedule, Megatron's otherwise: DeepSpeed runs Megatron-DeepSpeed's TP)
"""

from __future__ import annotations

from zerosim.cli import choices


def add_tensor_arguments(p) -> None:
    t = p.add_argument_group("tensor parallelism (Megatron's column- and row-parallel layers beside ZeRO)")
    t.add_argument("--tp", type=int, default=None, metavar="T",
                   help="tensor-parallel degree: T consecutive GPUs split every layer; --ranks stays the GPU count, "
                        "the data-parallel degree is ranks / T (default 1)")
    t.add_argument("--sp", action="store_true",
                   help="with --tp: sequence parallelism (norms on sequence shards; all-gather / reduce-scatter "
                        "along the sequence instead of all-reduce)")
    t.add_argument("--tp-layout", choices=choices.TP_LAYOUTS, default=None,
                   help="with --tp: what a TP rank keeps for backward: megatron (each column GEMM's input as its "
                        "sequence shard) or torchtitan (torch DTensor's all-gathered input); default by --comm: "
                        "torchtitan for fsdp, megatron otherwise")


def add_async_argument(p) -> None:
    p.add_argument("--async-tp", action="store_true",
                   help="with --tp: TP's collectives overlap the GEMMs they feed, as torchtitan's async TP and "
                        "Megatron's --tp-comm-overlap try to (an upper bound: no compute waits for them)")


FRAMEWORK_LAYOUT = {"fsdp": "torchtitan"}  # --comm -> the TP layout of the framework that runs that schedule


def layout_of(args) -> str:
    """--tp-layout, or the layout of the framework --comm names (FRAMEWORK_LAYOUT; Megatron's otherwise)."""
    given = getattr(args, "tp_layout", None)
    return given if given is not None else FRAMEWORK_LAYOUT.get(getattr(args, "comm", None), "megatron")


def tensor_of(args, ranks: int | None) -> tuple:
    """(T, SP) from --tp and --sp, checked against the GPUs: T divides --ranks (None: not known yet, a resumed run's
    saved count, checked where the run reads it)."""
    tp = 1 if getattr(args, "tp", None) is None else args.tp
    sp = bool(getattr(args, "sp", False))
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"--tp must be a positive integer, got {tp!r}")
    if sp and tp == 1:
        raise ValueError("--sp cuts the sequence over the TP group: give --tp T > 1 with it (Megatron turns sequence "
                         "parallelism off at tensor parallel size 1)")
    if getattr(args, "async_tp", False) and tp == 1:
        raise ValueError("--async-tp overlaps TP's collectives: give --tp T > 1 with it")
    if getattr(args, "tp_layout", None) is not None and tp == 1:
        raise ValueError("--tp-layout says what a TP rank keeps: give --tp T > 1 with it")
    if ranks is not None and ranks % tp:
        raise ValueError(f"--tp {tp} does not divide --ranks {ranks}: --ranks counts every GPU and the data-parallel "
                         f"degree is ranks / tp")
    return tp, sp
