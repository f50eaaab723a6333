"""Formats, casting, rounding modes, ulp and lost-update tests: the bottom layer of zerosim."""

from zerosim.precision.cast import ROUNDINGS, cast, to_float64
from zerosim.precision.formats import FORMATS, Format, format_of, get_format
from zerosim.precision.policy import PRESETS, MixedPrecision, get_precision
from zerosim.precision.ulp import lost_update, ulp

__all__ = ["FORMATS", "Format", "MixedPrecision", "PRESETS", "ROUNDINGS", "get_precision", "cast", "format_of", "get_format", "lost_update", "to_float64", "ulp"]
