"""The oracle with DeepSpeed's qgZ in its gradient reduction: a run whose gradients travel in int4.

    ref = QgzReference(GPT(6, 16, 2, 1, 6), Adam(lr=1e-2), "fp16-mixed", world_size=8, gpus_per_node=4)
    ref.step(batches)   # each 2-D parameter that qgZ takes: all_to_all_quant_reduce; the rest: the plain ring

What DeepSpeed's stage 3 does with `zero_quantized_gradients` (runtime/zero/stage3.py: __avg_scatter_grads, then
runtime/comm/coalesced_collectives.py: all_to_all_quant_reduce): every gradient of dim > 1 with M % 2W == 0 goes
through qgZ (collectives/quantized/_qgz.py), the others through `reduce_scatter_coalesced`. The result the optimizer
reads is qgZ's Σ/n for the first (n nodes), Σ/W for the others (quantized/_qgz.py's NOTE: nothing divides by the d
GPUs of a node).

Here the plain reduction is the oracle's (`Reference._reduce`: the ring sum in the wire format), and each qgZ
parameter's elements are replaced by the int4 route's result, so that the oracle's division by W (_recipes.py
`finish`) returns it exactly: fl32(x·W) / W = x for an fp16 x and W < 2^13 (11 + 13 bits fit in fp32's 24). This
reference is what a run with qgZ computes, rounding for rounding, the
collective and its error feedback included. Stage 3 with the "seeds" recipe (one division by W at the end), or with
"deepspeed-zero3" (recipe="deepspeed-zero3"): then the plain parameters are the recipe's (pre-divided by W on the
wire) and the qgZ ones its Σ/n cast as the recipe keeps it — what `ZeroEngine(wire=Wire(zero_quantized_gradients=
True))` computes, bit for bit (tests/test_qgz_engine.py).
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import Cluster
from zerosim.collectives.quantized import LocoState, all_to_all_quant_reduce, check_qgz, qgz_applies
from zerosim.reference import _recipes as recipes
from zerosim.reference._oracle import Reference


class QgzReference(Reference):
    """`Reference` (same arguments) whose reduction sends every parameter qgZ takes through it.

    Args (besides Reference's):
        gpus_per_node: d; the world_size N = n·d with n > 1 nodes (qgZ runs only across nodes).
        loco: a `qgz.LocoState` for LoCo's error feedback (kept across steps), or None.

    `quantized` names the parameters that travel in int4, as (layer, name); `trace` is the trace of the
    all-to-alls.
    """

    def __init__(self, model, optimizer, precision="fp16-mixed", world_size: int = 2, params=None,
                 gpus_per_node: int = 1, loco: LocoState | None = None, **options):
        super().__init__(model, optimizer, precision, world_size, params, **options)
        if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be a positive integer, got {gpus_per_node!r}")
        if world_size % gpus_per_node or world_size // gpus_per_node < 2:
            raise ValueError(f"qgZ runs across nodes: {world_size} ranks in nodes of {gpus_per_node} make "
                             f"{world_size / gpus_per_node:g} node(s), it needs a whole number of at least 2")
        if self.precision.reduce_format.name != "fp16" or self.precision.compute_format.name != "fp16":
            raise ValueError(f"qgZ's kernels read fp16 gradients; this precision computes in "
                             f"{self.precision.compute_format.name} and reduces in {self.precision.reduce_format.name}")
        self.deepspeed = self.recipe.reduction == "deepspeed-zero3"
        if ((self.twin.divides_by_n and not self.deepspeed) or self.accumulation_steps != 1
                or self.reduce_every_micro_step):
            raise ValueError("QgzReference models the 'seeds' recipe (one division by N at the end) or "
                             "'deepspeed-zero3' (qgZ's Σ/n kept as it comes), with one micro-batch a step")
        if world_size >= 2**13:
            raise ValueError(f"{world_size} ranks: x·N would not be exact in fp32 (see the module docstring)")
        self.d, self.loco = gpus_per_node, loco
        self.cluster = Cluster(world_size)
        self.trace = self.cluster.trace
        nodes = world_size // gpus_per_node
        self.quantized = tuple((s.layer, s.name) for s in model.specs if qgz_applies(s.shape, world_size, nodes))
        for s in model.specs:
            if (s.layer, s.name) in self.quantized:
                check_qgz(s.shape, world_size, nodes)  # the kernels' group split, before any step runs

    def step(self, batches) -> list:
        """Reference.step, then LoCo's errors as DeepSpeed treats them once the scaler has decided
        (collectives/quantized/_qgz.py LocoState.after_step: dropped by an overflow, rescaled by a new scale)."""
        decided = len(self.decisions)
        losses = super().step(batches)
        if self.loco is not None and len(self.decisions) > decided:
            d = self.decisions[-1]
            self.loco.after_step(d.skip, d.scale_after / d.scale_before)
        return losses

    def _reduce(self, grads: list) -> np.ndarray:
        plain = super()._reduce(grads)  # (N*s,) the ring's sum in fp16, every element
        out = plain.astype(np.float32)  # exact
        n = self.world_size
        if self.deepspeed:  # the recipe's `after` cast each piece already; finish divides by nothing
            out = plain.copy()
        # the engine's order (DeepSpeed's: backward's buckets, last layer first, each sorted by ds_id), which
        # decides where LoCo's one counter passes reset_T
        for s in sorted(self.model.specs, key=lambda s: (-s.layer, s.offset)):
            if (s.layer, s.name) not in self.quantized:
                continue
            mine = [g[s.offset : s.offset + s.size] for g in grads]  # (M,) fp16 per rank, the parameter's own order
            parts = all_to_all_quant_reduce(self.cluster, mine, s.shape, self.d, loco=self.loco,
                                            key=f"{s.layer}.{s.name}", tag=f"layer {s.layer} {s.name} grads")
            whole = np.concatenate(parts).astype(np.float32)  # (M,) Σ/n, rank p's partition at p·M/W
            if self.deepspeed:  # `.to(gradient_accumulation_dtype)` (stage3.py __avg_scatter_grads)
                out[s.offset : s.offset + s.size] = recipes.after(np.concatenate(parts), self.twin, n,
                                                                  self.precision)
            else:
                out[s.offset : s.offset + s.size] = whole * np.float32(n)  # exact; finish's / N gives it back
        return out
