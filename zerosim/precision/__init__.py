"""Formats, casting, rounding modes, ulp, lost-update tests and loss scaling: the bottom layer of zerosim."""

from zerosim.precision.cast import ROUNDINGS, cast, to_float64
from zerosim.precision.formats import FORMATS, Format, format_of, get_format
from zerosim.precision.loss_scaling import (
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
from zerosim.precision.policy import PRESETS, MixedPrecision, get_precision
from zerosim.precision.ulp import lost_update, ulp

__all__ = [
    "DeepSpeedLossScaler", "FORMATS", "Format", "LOSS_SCALERS", "LossScaleAtMinimum", "MixedPrecision", "PRESETS",
    "ROUNDINGS", "StaticLossScale", "StepDecision", "TorchGradScaler", "cast", "format_of", "get_format",
    "get_loss_scaler", "get_precision", "has_inf_or_nan", "loss_scaler_from_state_dict", "lost_update",
    "to_float64", "ulp", "unscale",
]
