"""Casting between formats the way hardware does it: one rounding, to nearest, ties to even (or stochastic).

    from zerosim.precision.cast import cast
    cast(x, "bf16")                                 # from any float array; float64 rounds once
    cast(x, "fp16", rounding="stochastic", seed=0)  # each element's own uniform (counter-based)

    _cast.py            `cast`, the fast twin: whole-array kernels (nearest, saturate), `to_float64`
    _reference.py       `cast_reference`, the naive twin it is tested against, bit for bit, on every pattern
    _inputs.py          the front door both twins share: what `cast` accepts, the checks before rounding
    _stochastic.py      stochastic rounding with integer operations on the bit pattern
    _counter_random.py  uniforms that belong to an element (its index and a seed), not to whoever computes it
    _namespace.py       `cast_on`: the same steps on another array module (CuPy, the NumPy stand-in)
    _bf16_bits.py       bf16 through uint16 bit operations, for array modules without a bfloat16 dtype
    _subnormals.py      float32 <-> float64 that keep float32's subnormals where the device flushes them
"""

from zerosim.precision.cast._cast import cast, to_float64
from zerosim.precision.cast._counter_random import counter_uniforms
from zerosim.precision.cast._inputs import ROUNDINGS, has_values
from zerosim.precision.cast._namespace import cast_on
from zerosim.precision.cast._reference import cast_reference
from zerosim.precision.cast._subnormals import f32_to_f64, f64_to_f32

__all__ = ["ROUNDINGS", "cast", "cast_on", "cast_reference", "counter_uniforms", "f32_to_f64", "f64_to_f32",
           "has_values", "to_float64"]
