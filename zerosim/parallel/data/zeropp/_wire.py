"""Fewer bits on the wire at ZeRO-3: the gather of a unit's weights quantized, by DeepSpeed's and torchao's names.

    engine = ZeroEngine(model, cluster, 3, Adam(), "bf16-mixed", wire=Wire(zero_quantized_weights=True))
    engine = ZeroEngine(model, cluster, 3, Adam(), "bf16-mixed", wire=Wire(fp8_all_gather="torchao"))

`Wire` names the options as the frameworks do: DeepSpeed's `zero_quantized_weights` (ZeRO++ qwZ: int8 groups of
the 16-bit shard, collectives/quantized/_all_gather.py), torchao's `enable_fsdp_float8_all_gather` (`fp8_all_gather`:
the fp32 master shard cast straight to e4m3 with one scale per unit, agreed through one MAX all-reduce of every unit's
amax before the step's first gather, as `precompute_float8_dynamic_scale_for_fsdp` does after each optimizer step; or a
Transformer Engine recipe by name: "current", "delayed", "mxfp8"). The weights a unit computes with are what the
receiver dequantizes; the master, the optimizer and the gradients stay as they were (both frameworks quantize the
copy that travels, not the weight that is updated). DeepSpeed's `zero_quantized_gradients` (qgZ) replaces stage 3's
reduce-scatter of every gradient it admits by its int4 all-to-alls (collectives/quantized/_qgz.py, run by
_qgz_reduce.py), with LoCo's error feedback when `loco=LocoParams(...)` (DeepSpeed's `zeropp_loco_param`).

Each step's fp8 scales are a buffer of each rank's ledger ("fp8 scales", freed with the step); a recipe's decisions
are `Fp8ScaleUpdate` events in the trace, as the loss scaler's are `LossScaleUpdate`s.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.cluster import Fp8ScaleUpdate, Handle

# NOTE: the quantized collectives and the fp8 recipes are imported where a quantized wire uses them: the default wire
# (nothing quantized) never does, and `from zerosim import ZeroEngine` need not load them (benchmarks/imports.py)
if TYPE_CHECKING:
    from zerosim.collectives.quantized import LocoState

SCALES = "fp8 scales"
FP8_WIRE_NAMES = {  # what `describe` (and so the CLI) calls each fp8_all_gather choice
    "torchao": "torchao's enable_fsdp_float8_all_gather",
    "torchao-amax_to_scale": "torchao's enable_fsdp_float8_all_gather without precompute: amax_to_scale each gather",
    "current": "Transformer Engine's current scaling",
    "delayed": "Transformer Engine's delayed scaling",
    "mxfp8": "Transformer Engine's MXFP8BlockScaling",
}
LOCO_RELEASE = "DeepSpeed <= 0.19.7"  # 0.19.8 rejects zeropp_loco_param (runtime/config.py: _REMOVED_ZERO_CONFIG_KEYS)


@dataclass(frozen=True)
class LocoParams:
    """DeepSpeed's `zeropp_loco_param` (runtime/zero/config.py): LoCo's error feedback for qgZ. DeepSpeed <= 0.19.7:
    0.19.8 removed LoCo (its config key is refused there); zerosim keeps it, labelled (docs/frameworks.md)."""

    err_beta: float = 0.8  # e' = β·e + (1 − β)·(new error)
    reset_T: int = 1024  # qgZ calls between resets of every error buffer

    def __post_init__(self):
        beta = self.err_beta
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 <= beta <= 1:
            raise ValueError(f"err_beta must be a number in [0, 1], got {self.err_beta!r}")
        if isinstance(self.reset_T, bool) or not isinstance(self.reset_T, int) or self.reset_T < 0:
            raise ValueError(f"reset_T must be a non-negative integer, got {self.reset_T!r}")


@dataclass(frozen=True)
class Wire:
    """What travels in fewer bits (module docstring). Defaults: nothing does."""

    zero_quantized_weights: bool = False  # DeepSpeed ZeRO++ qwZ: the stage-3 gather in int8
    weight_groups: object = "deepspeed"  # qwZ's groups: CUDAQuantizer's adaptive count, or a fixed group size
    fp8_all_gather: str | None = None  # torchao's fp8 all-gather: "torchao" (its own), or "current", "delayed", "mxfp8"
    zero_quantized_gradients: bool = False  # DeepSpeed ZeRO++ qgZ: stage 3's gradient reduce-scatter in int4
    loco: LocoParams | None = None  # DeepSpeed's zeropp_loco_param: qgZ's error feedback

    def __post_init__(self):
        if not isinstance(self.zero_quantized_gradients, bool):
            raise TypeError(f"zero_quantized_gradients must be True or False, got {self.zero_quantized_gradients!r}")
        if self.loco is not None and not isinstance(self.loco, LocoParams):
            raise TypeError(f"loco must be a zeropp.LocoParams or None, got {self.loco!r}")
        if self.loco is not None and not self.zero_quantized_gradients:
            raise ValueError("loco is qgZ's error feedback: it needs zero_quantized_gradients=True")
        if self.zero_quantized_weights and self.fp8_all_gather is not None:
            raise ValueError("choose one quantized gather: zero_quantized_weights (DeepSpeed) or fp8_all_gather "
                             "(torchao), not both")
        if self.fp8_all_gather is not None and self.fp8_all_gather not in _fp8_recipes():
            raise ValueError(f"fp8_all_gather must be one of {tuple(_fp8_recipes())}, got {self.fp8_all_gather!r}")
        if self.weight_groups != "deepspeed" and (isinstance(self.weight_groups, bool)
                                                  or not isinstance(self.weight_groups, int) or self.weight_groups < 1):
            raise ValueError(f"weight_groups must be 'deepspeed' or a positive group size, got {self.weight_groups!r}")

    def describe(self) -> str:
        """The wire in words, by the frameworks' names (what the CLI prints)."""
        if self.zero_quantized_gradients:
            weights = "" if not self.gathers_quantized else "; weights: " + Wire(
                self.zero_quantized_weights, self.weight_groups, self.fp8_all_gather).describe()
            loco = "" if self.loco is None else (f", LoCo error feedback ({LOCO_RELEASE}) "
                                                 f"err_beta={self.loco.err_beta:g} reset_T={self.loco.reset_T}")
            return f"gradients int4 through two all-to-alls (DeepSpeed ZeRO++ qgZ{loco}){weights}"
        if self.zero_quantized_weights:
            groups = "CUDAQuantizer's adaptive groups" if self.weight_groups == "deepspeed" else (
                f"groups of {self.weight_groups:,}")
            return f"int8 with fp32 scales (DeepSpeed ZeRO++ qwZ, {groups})"
        if self.fp8_all_gather == "mxfp8":
            return "MXFP8: e4m3 with an E8M0 scale a block of 32 (Transformer Engine's MXFP8BlockScaling)"
        if self.fp8_all_gather is not None:
            return f"e4m3, one scale a unit ({FP8_WIRE_NAMES[self.fp8_all_gather]})"
        return "unquantized"

    @property
    def gathers_quantized(self) -> bool:
        return self.zero_quantized_weights or self.fp8_all_gather is not None

    def check(self, plan, layout, specs=()) -> None:
        """Raise before anything runs if this wire cannot run on `plan` and `layout` (every unit, every rank);
        `specs`, the model's parameters, name the weights torchao would convert."""
        if self.gathers_quantized and not plan.gathers_params:
            raise ValueError(f"quantized weight gathers run where ZeRO gathers weights: stage 3, not {plan.stage}")
        if self.gathers_quantized and plan.uses_groups:  # qwZ's secondary copy (hpZ) and MiCS's groups: not modelled
            raise ValueError(f"quantized weight gathers run over the whole world here: {plan.label} gathers within "
                             "groups, which zerosim does not quantize (pass wire=None, or the flat stage 3)")
        if (self.fp8_all_gather or "").startswith("torchao") and getattr(layout, "split", None) == "dim 0":
            _refuse_empty_fsdp2_shards(layout, specs)
        if self.zero_quantized_weights and self.weight_groups == "deepspeed":
            from zerosim.collectives.quantized import group_count

            for layer in range(len(layout.windows)):
                counts = layout.counts(layer)
                if sum(counts) == 0:
                    continue
                for r, m in enumerate(counts):
                    try:
                        group_count(m, "deepspeed")
                    except ValueError as e:
                        raise ValueError(f"layer {layer}, rank {r}'s piece of {m} elements: {e}; pass "
                                         "weight_groups=<group size> (zerosim's fixed groups) to run it") from None


def _fp8_recipes() -> dict:
    """precision/quantize's FP8_RECIPES, imported where an fp8 wire is asked for."""
    from zerosim.precision.quantize import FP8_RECIPES

    return FP8_RECIPES


def _refuse_empty_fsdp2_shards(layout, specs) -> None:
    """torchao 0.18 raises on a rank whose FSDP2 shard of a weight is empty (fewer rows than ranks): `torch.max` of
    an empty tensor in tensor_to_amax, `torch._foreach_norm(ord=inf)` in precompute_float8_dynamic_scale_for_fsdp
    (precision/quantize/_fp8_scaling.py). zerosim refuses the same weights (the 2-D ones: Float8Linear converts
    weights, not biases), before anything is built."""
    n = layout.world_size
    for spec in specs:
        rows = spec.shape[0] if spec.shape else 0
        per = -(-rows // n)  # torch.chunk's ceil(rows/N) rows a rank (FSDP2's _chunk_with_empty): the last may get none
        empty = [r for r in range(n) if r * per >= rows]
        if len(spec.shape) >= 2 and spec.size and empty:
            raise ValueError(f"torchao 0.18's fp8 all-gather raises on an empty shard (torch.max / torch._foreach_norm "
                             f"of an empty tensor: float8_utils.py tensor_to_amax, fsdp_utils.py "
                             f"precompute_float8_dynamic_scale_for_fsdp): {spec.name} {tuple(spec.shape)} has "
                             f"{spec.shape[0]} rows for {layout.world_size} ranks, so rank(s) {empty} hold none")


@dataclass
class WireState:
    """What a wire keeps across steps, the same on every rank: one fp8 recipe per unit (a delayed one's history),
    LoCo's error buffers; and the model's parameter specs qgZ cuts by (their shapes decide what it admits)."""

    wire: Wire
    recipes: dict = field(default_factory=dict)  # layer -> recipe state machine
    specs: tuple = ()  # the model's ParamSpecs (layer, name, offset, size, shape)
    loco: LocoState | None = None  # qgZ's error feedback, made from wire.loco

    def __post_init__(self):
        if self.wire.loco is not None and self.loco is None:
            from zerosim.collectives.quantized import LocoState

            self.loco = LocoState(err_beta=self.wire.loco.err_beta, reset_T=self.wire.loco.reset_T)

    def recipe(self, layer: int):
        if layer not in self.recipes:
            from zerosim.precision.quantize import get_fp8_recipe

            self.recipes[layer] = get_fp8_recipe(self.wire.fp8_all_gather)
        return self.recipes[layer]


def gather_quantized(ctx, layer: int, adopt_as: str) -> Handle:
    """ZeRO-3's gather of unit `layer`, quantized as the wire says; each rank adopts the dequantized (b - a,)
    compute-format window as `adopt_as` (kind "params"), as gather.gather does."""
    from zerosim.collectives.quantized import fp8_all_gather, mxfp8_all_gather, qwz_all_gather

    wire, layout, ranks, cluster = ctx.wire.wire, ctx.layout, ctx.ranks, ctx.cluster
    counts = layout.counts(layer)
    out_format = ctx.policy.compute_format
    held = [_receive_buffers(rank.ledger, wire, counts) for rank in ranks]
    with cluster.trace.about(purpose="gather params", layers=(layer,)):
        if wire.zero_quantized_weights:
            pieces = [rank.params.array[slice(*layout.owned_piece(layer, rank.index))] for rank in ranks]
            got = qwz_all_gather(cluster, pieces, counts, wire.weight_groups, out_format, f"{ctx.names[layer]} params")
        else:
            pieces = [_master(ctx, rank)[slice(*layout.owned_piece(layer, rank.index))] for rank in ranks]
            if wire.fp8_all_gather == "mxfp8":
                got = mxfp8_all_gather(cluster, pieces, counts, out_format, f"{ctx.names[layer]} params")
            else:
                scale = (_scale_at_gather if ctx.wire.recipe(layer).per_gather else _scales)(ctx, layer, pieces)
                fmt = ctx.wire.recipe(layer).fmt("forward")
                got = fp8_all_gather(cluster, pieces, scale, counts, out_format, fmt, f"{ctx.names[layer]} params")
    for rank, window, bufs in zip(ranks, got, held):
        rank.ledger.adopt(adopt_as, window, "params")
        for b in bufs:  # dequantized: the received integers (or fp8) and scales are let go
            b.free()
    return got.handle


RECEIVED = "(received, quantized)"


def _receive_buffers(ledger, wire: Wire, counts) -> list:
    """What a rank holds while a quantized gather lands, beside the dequantized window it then adopts: the whole
    unit's payload and scales from every rank (kind "comm"). DeepSpeed all-gathers qwZ's int8 and fp32 scales into
    buffers of their own and dequantizes from them (partition_parameters.py: _all_gather_coalesced,
    AllGatherCoalescedHandle.wait); torchao's fp8 all-gather lands in an fp8 buffer before its cast
    (float8/fsdp_utils.py: fsdp_post_all_gather). Counted, not written: the collective returns its own arrays."""
    from zerosim.collectives.quantized import group_count, padded_count
    from zerosim.precision.quantize import block_count

    if wire.zero_quantized_weights:
        g = wire.weight_groups
        sizes = [("int8", sum(padded_count(m, g) for m in counts), np.int8),
                 ("scales", sum(group_count(m, g) if m or g == "deepspeed" else 0 for m in counts), np.float32)]
    elif wire.fp8_all_gather == "mxfp8":
        sizes = [("fp8", sum(counts), np.uint8), ("e8m0 scales", sum(block_count(m) for m in counts), np.uint8)]
    else:
        sizes = [("fp8", sum(counts), np.uint8)]
    return [ledger.alloc(f"gather {what} {RECEIVED}", n, dtype, "comm") for what, n, dtype in sizes]


def _master(ctx, rank):
    """The high-precision shard torchao casts: the fp32 master (FSDP2's sharded parameter), else the params."""
    return rank.master.array if rank.master is not None else rank.params.array


def _scale_at_gather(ctx, layer: int, pieces) -> np.float32:
    """torchao without a precomputed scale (fsdp_pre_all_gather -> tensor_to_scale, reduce_amax=True): this unit's
    amax all-reduced right before each of its gathers, forward and backward alike, then amax_to_scale."""
    from zerosim.collectives.quantized import fp8_amax_all_reduce

    cluster = ctx.cluster
    amax = fp8_amax_all_reduce(cluster, [[p] for p in pieces], tag=f"fp8 amax ({ctx.names[layer]})")
    value = amax[0][0] if cluster.backend.holds_values else np.float32(0)
    decision = ctx.wire.recipe(layer).update("forward", value)
    step = max((c.step for c in cluster.trace.calls[-1:]), default=0)
    cluster.trace.record(Fp8ScaleUpdate(step, layer, decision.recipe, decision.role, decision.fmt, decision.amax,
                                        decision.scale_before, decision.scale_after, tuple(amax.handle)))
    return np.float32(decision.scale_after)


def _scales(ctx, layer: int, pieces) -> np.float32:
    """Unit `layer`'s fp8 scale this step, from the step's per-unit scales: made by the step's first fp8 gather (one
    MAX all-reduce of every unit's amax over every rank, then each unit's recipe decides), kept in each rank's
    ledger until the step ends."""
    return _step_scales(ctx)[layer]


def _step_scales(ctx) -> np.ndarray:
    from zerosim.collectives.quantized import fp8_amax_all_reduce

    first = ctx.ranks[0].ledger.live.get(SCALES)
    if first is not None:
        return first.array
    layout, cluster, state = ctx.layout, ctx.cluster, ctx.wire
    layers = range(len(layout.windows))
    pieces = [[_master(ctx, rank)[slice(*layout.owned_piece(x, rank.index))] for x in layers] for rank in ctx.ranks]
    with cluster.trace.about(purpose="gather params", layers=()):
        amax = fp8_amax_all_reduce(cluster, pieces, tag="fp8 amax (every unit)")
    values = amax[0] if cluster.backend.holds_values else np.zeros(len(layers), np.float32)
    scales = np.empty(len(layers), np.float32)
    step = max((c.step for c in cluster.trace.calls[-1:]), default=0)
    for x in layers:
        recipe = state.recipe(x)
        if recipe.kind == "delayed":
            scales[x] = recipe.scale("forward")  # this step casts with the scale the earlier steps made
            recipe.record("forward", values[x])
            decision = recipe.update("forward", values[x])  # ...and this step's amax makes the next one's
        else:
            decision = recipe.update("forward", values[x])
            scales[x] = decision.scale_after
        cluster.trace.record(Fp8ScaleUpdate(step, x, decision.recipe, decision.role, decision.fmt, decision.amax,
                                            decision.scale_before, decision.scale_after, tuple(amax.handle)))
    for rank in ctx.ranks:
        rank.ledger.adopt(SCALES, scales.copy(), "comm")  # (units,) fp32, until the step ends
    return scales
