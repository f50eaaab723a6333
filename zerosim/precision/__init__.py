"""Formats, casting, rounding modes, ulp, lost-update tests and loss scaling: the bottom layer of zerosim.

    _formats.py       Format and FORMATS: fp64 ... fp8 by name, the facts a learner looks up
    _ulp.py           spacing between neighbours, and the lost-update test built on it
    _policy.py        MixedPrecision: which format each tensor of training lives in, as data
    _loss_scaling.py  the loss scalers: static, torch's GradScaler, DeepSpeed's dynamic scaler
    cast/             `cast`: one rounding, to nearest (or stochastic), with its naive twin, on the array module
                      the ranks' arrays live in (NumPy, CuPy with bf16 as uint16, a stand-in)
    quantize/         fp8 with scales and DeepSpeed's integer quantizer
"""

from zerosim.precision._formats import FORMATS, Format, format_of, get_format
from zerosim.precision._loss_scaling import (
    LOSS_SCALERS,
    DeepSpeedLossScaler,
    LossScaleAtMinimum,
    StaticLossScale,
    StepDecision,
    TorchGradScaler,
    get_loss_scaler,
    has_inf_or_nan,
    loss_scaler_from_state_dict,
    unscale,
)
from zerosim.precision._policy import ALLREDUCES, OPTIM_STATES, PRESETS, REDUCTIONS, MixedPrecision, get_precision
from zerosim.precision._ulp import lost_update, ulp
from zerosim.precision.cast import ROUNDINGS, cast, to_float64

__all__ = [
    "ALLREDUCES", "OPTIM_STATES", "REDUCTIONS",
    "DeepSpeedLossScaler", "FORMATS", "Format", "LOSS_SCALERS", "LossScaleAtMinimum", "MixedPrecision", "PRESETS",
    "ROUNDINGS", "StaticLossScale", "StepDecision", "TorchGradScaler", "cast", "format_of", "get_format",
    "get_loss_scaler", "get_precision", "has_inf_or_nan", "loss_scaler_from_state_dict", "lost_update",
    "to_float64", "ulp", "unscale",
]
