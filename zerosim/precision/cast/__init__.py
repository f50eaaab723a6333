"""Casting between formats the way hardware does it — one rounding, to nearest, ties to even (or stochastic) — on any
array module a rank's arrays live in: NumPy on the host, CuPy on a GPU (bf16 stored as uint16), or a NumPy stand-in
that refuses what CuPy refuses, so the device path is checked without a GPU.

    from zerosim.precision.cast import cast
    cast(x, "bf16")                                 # from any float array; float64 rounds once
    cast(x, "fp16", rounding="stochastic", seed=0)  # each element's own uniform (counter-based)

    _cast.py            `cast`, the fast twin: whole-array kernels (nearest, saturate), `to_float64`
    _fp16.py            float32/float64 into float16 with astype's bits, without its slow subnormals (cast's fp16 path)
    _reference.py       `cast_reference`, the naive twin it is tested against, bit for bit, on every pattern
    _inputs.py          the front door both twins share: what `cast` accepts, the checks before rounding
    _stochastic.py      stochastic rounding with integer operations on the bit pattern
    _counter_random.py  uniforms that belong to an element (its index and a seed), not to whoever computes it
    _arrays.py          ArrayNamespace: an array module and how it stores each format; NUMPY, device_namespace
    _namespace.py       `cast_on`: the naive twin's steps on another array module (CuPy, the stand-in)
    _standin.py         StandinArray: a NumPy array dressed as a CuPy array (its data on the host)
    _meta_array.py      MetaArray: a tensor with no data (a shape and a dtype), the one way zerosim models one
    _bf16_bits.py       bf16 through uint16 bit operations, for array modules without a bfloat16 dtype
    _subnormals.py      float32 <-> float64 that keep float32's subnormals where the device's float32 work flushes them
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._arrays": ("NUMPY", "ArrayNamespace", "device_namespace", "namespace_of", "numpy_standin"),
    "._cast": ("cast", "to_float64"),
    "._counter_random": ("counter_uniforms",),
    "._inputs": ("ROUNDINGS", "has_values"),
    "._meta_array": ("META_NAMESPACE", "MetaArray", "MetaDataError"),
    "._namespace": ("cast_on",),
    "._reference": ("cast_reference",),
    "._subnormals": ("f32_to_f64", "f64_to_f32"),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
