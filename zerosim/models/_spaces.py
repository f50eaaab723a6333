"""Where a model's new arrays come from: the array module of the arrays it was handed.

A model never imports a backend: it makes buffers "like" its inputs. NumPy's and the meta backend's arrays
name their module through the array API's `__array_namespace__`; CuPy's arrays have none (CuPy 14), so
their module is found by name; the CPU stand-in for CuPy (precision/cast/_standin.py) names its own.
"""

from __future__ import annotations

import sys


def space_of(x):
    """The module that makes arrays like `x`: its array-API namespace, the stand-in's, or its module (CuPy)."""
    if hasattr(x, "__array_namespace__"):
        return x.__array_namespace__()
    if hasattr(x, "xp_module"):
        return x.xp_module
    return sys.modules[type(x).__module__.split(".")[0]]


def zeros_like_space(x, shape, dtype):
    """A zero-filled (shape) array of `dtype` from the module of `x` (numpy's, or a device's)."""
    return space_of(x).zeros(shape, dtype=dtype)
