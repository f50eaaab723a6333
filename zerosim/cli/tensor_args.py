"""The flags `zerosim memory`, `timeline`, `train` and `plan` share for tensor parallelism:

    --tp T      Megatron's tensor parallelism of degree T beside the ZeRO stage or strategy: each layer's heads,
                columns and vocabulary cut over T consecutive GPUs (one node's, by torchtitan's mesh order);
                --ranks stays the number of GPUs and the data-parallel degree is ranks / T, as torchtitan's
                degrees multiply to the world size
    --sp        with --tp: Megatron's sequence parallelism (norms and residuals on sequence shards; the
                all-reduces become all-gathers and reduce-scatters along the sequence)
    --async-tp  (timeline) with --tp: the bound of overlapping TP's collectives with the GEMMs they feed
                (torchtitan's async TP, Megatron's --tp-comm-overlap): no compute waits for them
"""

from __future__ import annotations


def add_tensor_arguments(p) -> None:
    t = p.add_argument_group("tensor parallelism (Megatron's column- and row-parallel layers beside ZeRO)")
    t.add_argument("--tp", type=int, default=None, metavar="T",
                   help="tensor-parallel degree: T consecutive GPUs split every layer; --ranks stays the GPU count, "
                        "the data-parallel degree is ranks / T (default 1)")
    t.add_argument("--sp", action="store_true",
                   help="with --tp: sequence parallelism (norms on sequence shards; all-gather / reduce-scatter "
                        "along the sequence instead of all-reduce)")


def add_async_argument(p) -> None:
    p.add_argument("--async-tp", action="store_true",
                   help="with --tp: TP's collectives overlap the GEMMs they feed, as torchtitan's async TP and "
                        "Megatron's --tp-comm-overlap try to (an upper bound: no compute waits for them)")


def tensor_of(args, ranks: int) -> tuple:
    """(T, SP) from --tp and --sp, checked against the GPUs: T divides --ranks."""
    tp = 1 if getattr(args, "tp", None) is None else args.tp
    sp = bool(getattr(args, "sp", False))
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"--tp must be a positive integer, got {tp!r}")
    if sp and tp == 1:
        raise ValueError("--sp cuts the sequence over the TP group: give --tp T > 1 with it (Megatron turns sequence "
                         "parallelism off at tensor parallel size 1)")
    if getattr(args, "async_tp", False) and tp == 1:
        raise ValueError("--async-tp overlaps TP's collectives: give --tp T > 1 with it")
    if ranks % tp:
        raise ValueError(f"--tp {tp} does not divide --ranks {ranks}: --ranks counts every GPU and the data-parallel "
                         f"degree is ranks / tp")
    return tp, sp
