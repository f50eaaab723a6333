"""Numerics measured against exact arithmetic: how far each recipe's and each mesh's average lands from float64 as N
grows, which gradients a 16-bit format flushes to zero, and runs side by side under several precision policies.

    _recipe_error.py   recipe_errors: each gradient recipe's average against the exact one, by N
    _mesh_error.py     mesh_errors: HSDP's two-level average against FULL_SHARD's and float64; the derived bound
    _underflow.py      flushed_fraction, log2_histogram: which gradients fp16 / bf16 flush, what loss scaling saves
    _state_formats.py  run_side_by_side: one model, data and start under several policies (16-bit optimizer state)
    _adam_snr.py       adam_snr: seed 001's "m̂/√v̂ ≈ the gradient's signal-to-noise ratio", measured on zerosim's Adam
"""

from zerosim.analysis.numerics._adam_snr import SNRReading, adam_snr
from zerosim.analysis.numerics._mesh_error import MeshError, bound, depth, gamma, mesh_average, mesh_errors
from zerosim.analysis.numerics._recipe_error import RecipeError, rank_gradients, recipe_average, recipe_errors
from zerosim.analysis.numerics._state_formats import RunRecord, run_side_by_side
from zerosim.analysis.numerics._underflow import (
                                                  backward_values,
                                                  flushed_fraction,
                                                  flushed_share,
                                                  log2_histogram,
                                                  one_step_gradient,
)

__all__ = [
    "MeshError", "RecipeError", "RunRecord", "SNRReading", "adam_snr", "backward_values", "bound", "depth",
    "flushed_fraction", "flushed_share", "gamma", "log2_histogram", "mesh_average", "mesh_errors", "one_step_gradient",
    "rank_gradients", "recipe_average", "recipe_errors", "run_side_by_side",
]
