"""The front door both casting twins share: what `cast` accepts, the checks it makes before rounding
anything, and where the stochastic draws come from. The rounding itself is a pair of kernels:
zerosim/precision/cast/_reference.py (naive) or zerosim/precision/cast/_cast.py (fast)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.precision._formats import Format, get_format
from zerosim.precision.cast._arrays import namespace_of

ROUNDINGS = ("nearest", "stochastic")


@dataclass(frozen=True)
class CastKernels:
    """How one twin rounds an array `a` (already one of our formats' dtypes) into format `f`."""

    nearest: Callable[[np.ndarray, Format], np.ndarray]  # (a, f) -> rounded to nearest, ties to even, once
    stochastic: Callable[[np.ndarray, Format, np.ndarray], np.ndarray]  # (a, f, u) -> up where u < p_up
    saturate: Callable[[np.ndarray, np.ndarray, Format], np.ndarray]  # (a, out, f) -> out with |a| > max clamped


def as_float_array(x) -> np.ndarray:
    """`x` as an array of one of our formats' dtypes; integers widen to float64 (exact below 2**53)."""
    a = np.asarray(x)
    if a.dtype.kind in "biu":
        return a.astype(np.float64)
    get_format(a.dtype)  # raises a clear error for object, complex, string, ... dtypes
    return a


def has_values(x) -> bool:
    """False for the meta backend's arrays (shape and dtype, no data): nothing to round or to check for NaN."""
    return not getattr(x, "is_meta", False)


def cast_with(kernels: CastKernels, x, fmt, rounding: str, rng, saturate: bool, uniforms) -> np.ndarray:
    """Check the arguments of a cast (raising before anything is rounded), then call the kernels."""
    f = get_format(fmt)
    if not isinstance(x, np.ndarray) and has_values(x):
        ns = namespace_of(x)  # a device array (CuPy, which has no __array_namespace__): round it where it lives
        if not ns.is_numpy:
            return ns.cast(x, f, rounding=rounding, uniforms=uniforms, saturate=saturate)
    if rounding not in ROUNDINGS:
        raise ValueError(f"unknown rounding {rounding!r}; choose one of {ROUNDINGS}")
    if not isinstance(saturate, (bool, np.bool_)):  # bool("no") is True: refuse a string rather than read it as yes
        raise ValueError(f"saturate must be True or False, got {saturate!r}")
    if not has_values(x):
        return x.astype(f.dtype)  # the meta backend's data-less array: nothing to round, only the dtype changes
    a = as_float_array(x)
    if rounding == "stochastic":
        if uniforms is not None:
            u = np.asarray(uniforms, dtype=np.float64)
            if u.shape != a.shape:
                raise ValueError(f"uniforms must have the shape of x, {a.shape}; got {u.shape}")
        elif isinstance(rng, np.random.Generator):
            u = rng.random(a.shape)
        else:
            raise ValueError("stochastic rounding needs rng=numpy.random.default_rng(seed) (or uniforms=...), so runs "
                             "can be repeated")
        out = kernels.stochastic(a, f, u)
    else:
        out = kernels.nearest(a, f)
    return kernels.saturate(a, out, f) if saturate else out
