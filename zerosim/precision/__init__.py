"""Formats, casting, rounding modes, ulp, lost-update tests and loss scaling: the bottom layer of zerosim.

    _formats.py       Format and FORMATS: fp64 ... fp8 by name, the facts a learner looks up
    _ulp.py           spacing between neighbours, and the lost-update test built on it
    _policy.py        MixedPrecision: which format each tensor of training lives in, as data
    _loss_scaling.py  the loss scalers: static, torch's GradScaler, DeepSpeed's dynamic scaler
    cast/             `cast`: one rounding, to nearest (or stochastic), with its naive twin, on the array module
                      the ranks' arrays live in (NumPy, CuPy with bf16 as uint16, a stand-in)
    quantize/         fp8 with scales and DeepSpeed's integer quantizer
"""

from zerosim._lazy import lazy_face, names_of

# eager: the function `cast` shares its name with the subpackage, which a first import of the subpackage would put in
# its place on this face (everything imports the subpackage anyway)
from zerosim.precision.cast import ROUNDINGS, cast, to_float64  # noqa: F401 (the face's: __all__ below)

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._formats": ("FORMATS", "FORMAT_BY_DTYPE", "Format", "format_of", "get_format", "is_ml_dtype", "known_format"),
    "._loss_scaling": (
        "LOSS_SCALERS", "DeepSpeedLossScaler", "LossScaleAtMinimum", "StaticLossScale", "StepDecision",
        "TorchGradScaler", "get_loss_scaler", "has_inf_or_nan", "loss_scaler_from_state_dict", "unscale",
    ),
    "._policy": ("ALLREDUCES", "OPTIM_STATES", "PRESETS", "REDUCTIONS", "MixedPrecision", "get_precision"),
    "._ulp": ("lost_update", "ulp"),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES) + ["ROUNDINGS", "cast", "to_float64"])
