"""The order in which one micro-batch visits a model's layers: forward, loss, recompute, backward.

An engine walks this list layer by layer across all its ranks (zerosim.parallel.data._engine); one device
walks it alone (`zerosim.models._run.forward_backward`, the oracle). Writing the order down once, as
data, is what lets both agree and lets a reader see where a ZeRO-3 gather must happen: before every
op that `needs_params`.

Activation checkpointing (seed 001 §5, seed 004 Stage 3): forward keeps only each block's input.
Backward, block by block from the last, re-runs the block's layers from that input to rebuild their
caches, then backpropagates through the block. The block's last layer is not re-run when its cache
is just its input (`saves_input_only`): the layer before it has just rebuilt that input, and its
output is not needed (seed 004 recomputes h and a, not y) — the "keep input" op saves it, no compute.

    no checkpointing     forward 0..n-1 (save caches) · loss · backward n-1..0
    checkpointing        per block: forward (save block input, then nothing) · loss ·
                         per block from the last: recompute s..e-2 (save caches), keep input e-1
                         (or recompute it) · backward e-1..s
    a saved block        (`Model.saved_blocks`: a decoder's embedding and head) forward (save caches) ·
                         backward, as without checkpointing
"""

from __future__ import annotations

from zerosim._dataclass import dataclass

KINDS = ("forward", "loss", "recompute", "keep input", "backward", "backward-input", "backward-weight")


@dataclass(frozen=True)
class Op:
    """One step of a micro-batch's pass: `kind` (KINDS) on layer `layer` (-1 for the loss)."""

    kind: str
    layer: int
    save: bool = True  # forward/recompute: keep this layer's cache for backward
    checkpoint: bool = False  # forward: keep this layer's input as its block's checkpoint
    from_checkpoint: bool = False  # recompute / keep input: start from the block's checkpoint

    @property
    def computes(self) -> bool:
        """False for the bookkeeping-only "keep input"."""
        return self.kind != "keep input"

    @property
    def makes_grads(self) -> bool:
        """Whether the op hands its layer's weight gradients on (a backward, or a zero-bubble backward-weight)."""
        return self.kind in ("backward", "backward-weight")


def schedule(model, checkpoint: bool = False) -> tuple:
    """The ops one micro-batch runs through `model`, in order (see the module docstring)."""
    n, layers = len(model.layers), model.layers
    if not checkpoint:
        return tuple(
            [Op("forward", i) for i in range(n)] + [Op("loss", -1)] + [Op("backward", i) for i in reversed(range(n))]
        )
    ops, saved = [], model.saved_blocks
    for start, stop in model.checkpoint_blocks:
        if (start, stop) in saved:  # left alone: its caches kept, as without checkpointing
            ops += [Op("forward", i) for i in range(start, stop)]
        else:
            ops += [Op("forward", i, save=False, checkpoint=i == start) for i in range(start, stop)]
    ops.append(Op("loss", -1))
    for start, stop in reversed(model.checkpoint_blocks):
        if (start, stop) in saved:
            ops += [Op("backward", i) for i in reversed(range(start, stop))]
            continue
        ops += [Op("recompute", i, from_checkpoint=i == start) for i in range(start, stop - 1)]
        last = "keep input" if layers[stop - 1].saves_input_only else "recompute"
        ops.append(Op(last, stop - 1, from_checkpoint=stop - 1 == start))
        ops += [Op("backward", i) for i in reversed(range(start, stop))]
    return tuple(ops)


def split_backward(model, ops) -> tuple:
    """Zero bubble's split of a backward (Qi et al. 2023, "Zero Bubble Pipeline Parallelism" §2: B, the input's
    gradient, hands on at once; W, the weights', waits): `ops` (the recompute and backward ops of some of `model`'s
    units) as (the same with each "backward" a "backward-input", then one "backward-weight" per unit that has
    weights, in the same order). A pipeline schedule runs the two lists at different times (parallel/pipeline)."""
    inputs = tuple(Op("backward-input", op.layer) if op.kind == "backward" else op for op in ops)
    return inputs, tuple(Op("backward-weight", op.layer) for op in ops
                         if op.kind == "backward" and model.layers[op.layer].param_shapes)


def needs_params(model, op: Op) -> bool:
    """Whether `op` reads its layer's weights (a ZeRO-3 engine gathers them first): not a loss, and not a
    backward-weight (dW = dyᵀ·x needs no weights)."""
    return op.computes and op.kind not in ("loss", "backward-weight") and bool(model.layers[op.layer].param_shapes)
