"""The flags that send ZeRO-3's weight gathers in fewer bits, by DeepSpeed's and torchao's names
(parallel/data/zeropp/_wire.py), for `zerosim timeline` and `zerosim memory`."""

from __future__ import annotations


def add_wire_arguments(p) -> None:
    """Stage 3's weight gathers in fewer bits, by DeepSpeed's and torchao's names (parallel/data/zeropp/_wire.py)."""
    from zerosim.cli.choices import FP8_RECIPES

    p.add_argument("--zero-quantized-weights", action="store_true",
                   help="DeepSpeed ZeRO++ qwZ: gather the 16-bit weights as int8 in CUDAQuantizer's groups (stage 3)")
    p.add_argument("--weight-groups", type=int, default=None, metavar="SIZE",
                   help="qwZ with fixed groups of SIZE elements instead of CUDAQuantizer's adaptive count")
    p.add_argument("--fp8-all-gather", nargs="?", const="torchao", default=None,
                   choices=FP8_RECIPES,
                   help="torchao 0.18's enable_fsdp_float8_all_gather: the fp32 master shard cast to e4m3 (stage 3), "
                        "its scale precomputed after each step (precompute_float8_dynamic_scale_for_fsdp); "
                        "torchao-amax_to_scale: without that call, an amax all-reduce and amax_to_scale at every "
                        "gather; or a Transformer Engine 2.18 recipe by name (docs/frameworks.md)")
    p.add_argument("--zero-quantized-gradients", action="store_true",
                   help="DeepSpeed ZeRO++ qgZ: stage 3's gradient reduce-scatter as int4 through two all-to-alls "
                        "(recipe deepspeed-zero3, fp16, two or more nodes: --gpus-per-node)")


def wire_from_args(args):
    """A zeropp.Wire from the flags, or None."""
    from zerosim.parallel.data.zeropp import Wire

    if args.weight_groups is not None and not args.zero_quantized_weights:
        raise ValueError("--weight-groups sets qwZ's group size: add --zero-quantized-weights")
    if args.weight_groups is not None and args.weight_groups < 1:
        raise ValueError(f"--weight-groups is qwZ's group size in elements, at least 1, got {args.weight_groups}")
    if args.zero_quantized_weights and args.fp8_all_gather is not None:
        raise ValueError("--zero-quantized-weights (DeepSpeed's int8 gathers) and --fp8-all-gather (torchao's e4m3 "
                         "gathers) both quantize stage 3's weight gathers: give one")
    qgz = getattr(args, "zero_quantized_gradients", False)
    if not args.zero_quantized_weights and args.fp8_all_gather is None and not qgz:
        return None
    return Wire(zero_quantized_weights=args.zero_quantized_weights, fp8_all_gather=args.fp8_all_gather,
                weight_groups="deepspeed" if args.weight_groups is None else args.weight_groups,
                zero_quantized_gradients=qgz)


def qgz_recipe(args) -> str | None:
    """DeepSpeed's stage-3 recipe when --zero-quantized-gradients asks for qgZ (it is DeepSpeed's reduction:
    parallel/data/zeropp/_qgz_reduce.py), else None (the plan's default)."""
    return "deepspeed-zero3" if getattr(args, "zero_quantized_gradients", False) else None


def check_qgz_model(args, model) -> None:
    """Refuse --zero-quantized-gradients on a model twin without matrices: the layer-sized model (no --seq-len) holds
    one flat tensor a layer, which qgZ, as DeepSpeed, sends the plain way (dim 1) — a run that would show no qgZ."""
    if getattr(args, "zero_quantized_gradients", False) and not any(len(s.shape) > 1 for s in model.specs):
        raise ValueError("--zero-quantized-gradients needs the model's matrices: add --seq-len and --batch (the "
                         "decoder twin); the layer-sized model has one flat tensor a layer, which qgZ sends "
                         "unquantized")
