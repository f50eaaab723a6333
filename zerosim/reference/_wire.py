"""The oracle's side of a quantized gather: the weights a unit computes with, quantized in the same order, here.

For each unit the oracle cuts the weights as the layout cuts them (each rank's piece of the unit's window, in
shard order) and quantizes and dequantizes every piece with the collectives' naive twins
(`naive_qwz_all_gather`, `naive_mxfp8_all_gather`) or, for an fp8 recipe with one scale a unit, the same cast
with the scale the unit's recipe decides from the global amax (max over the pieces here: no all-reduce). It shares
the kernels' arithmetic (precision/quantize/_int_quant.py, _fp8_scaling.py) and the recipes' state machines with the
engine, not the collectives' bookkeeping (who sends what, uneven counts, the amax all-reduce, the ledger).
"""

from __future__ import annotations

import numpy as np

from zerosim.collectives.quantized import naive_mxfp8_all_gather, naive_qwz_all_gather
from zerosim.precision.quantize import amax_of, get_fp8_recipe, scaled_cast, torchao_received


class WireOracle:
    """One per `Reference`: the wire (`zeropp.Wire`), each unit's recipe, and this step's scales."""

    def __init__(self, wire, layout, world_size: int):
        self.wire, self.layout, self.n = wire, layout, world_size
        self.recipes, self.scales = {}, None

    def pieces(self, arranged: np.ndarray, layer: int) -> list:
        s = self.layout.shard_size
        return [arranged[r * s + a : r * s + b] for r in range(self.n)
                for (a, b) in [self.layout.owned_piece(layer, r)]]

    def begin_step(self, master_arranged: np.ndarray) -> None:
        """The step's fp8 scales, before its first gather (as the engine's first fp8 gather makes them)."""
        self.scales = None
        if self.wire.fp8_all_gather in (None, "mxfp8"):
            return
        scales = []
        for layer in range(len(self.layout.windows)):
            recipe = self.recipes.setdefault(layer, get_fp8_recipe(self.wire.fp8_all_gather))
            pieces = self.pieces(master_arranged, layer)
            dtype = master_arranged.dtype if master_arranged.dtype.itemsize <= 4 else np.float32  # the all-reduce's
            amax = np.asarray(max((float(amax_of(p)) for p in pieces), default=0.0)).astype(dtype)  # exact
            if recipe.kind == "delayed":
                scales.append(recipe.scale("forward"))
                recipe.record("forward", amax)
                recipe.update("forward", amax)
            else:
                scales.append(np.float32(recipe.update("forward", amax).scale_after))
        self.scales = np.array(scales, np.float32)

    def window(self, params_arranged, master_arranged, layer: int, out_format) -> np.ndarray:
        """Unit `layer`'s gathered window (shard order), as every rank receives it."""
        w = self.wire
        if w.zero_quantized_weights:
            return naive_qwz_all_gather(self.pieces(params_arranged, layer), w.weight_groups, out_format)[0]
        pieces = self.pieces(master_arranged, layer)
        if w.fp8_all_gather == "mxfp8":
            return naive_mxfp8_all_gather(pieces, out_format)[0]
        s = self.scales[layer]
        fmt = self.recipes[layer].fmt("forward")
        return torchao_received(np.concatenate([scaled_cast(p, s, fmt) for p in pieces]), s, out_format)
