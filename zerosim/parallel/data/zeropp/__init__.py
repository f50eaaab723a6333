"""Fewer bits on the wire at ZeRO-3: DeepSpeed's ZeRO++ (qwZ: int8 weight gathers; qgZ: int4 gradient all-to-alls,
with LoCo's error feedback) and torchao's fp8 all-gather. The quantized collectives themselves are
`zerosim.collectives.quantized`'s; here is what the step does with them.

    _wire.py         Wire (what travels in fewer bits), WireState, LocoParams; a unit's quantized gather
    _qgz_reduce.py   qgZ in the engine: stage 3's gradient reduction through the int4 all-to-alls
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._qgz_reduce": ("LOCO", "check_qgz_engine", "ledger_rows", "reduce_params_qgz"),
    "._wire": ("LocoParams", "Wire", "WireState", "gather_quantized"),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
