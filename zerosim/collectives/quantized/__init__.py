"""Collectives with fewer bits on the wire: the payload (int8 / int4 / fp8 values and their scales) is what travels,
each rounding where the framework's kernel puts it.

    _all_gather.py   qwZ's int8 all-gather (DeepSpeed ZeRO++), torchao's fp8 all-gather, MXFP8; naive twins
    _qgz.py          qgZ: a gradient reduce-scattered as int4 through two all-to-alls; LoCo's error feedback state
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._all_gather": (
        "fp8_all_gather", "fp8_amax_all_reduce", "gather_payload", "group_count", "mxfp8_all_gather",
        "naive_fp8_all_gather", "naive_mxfp8_all_gather", "naive_qwz_all_gather", "padded_count", "qwz_all_gather",
    ),
    "._qgz": (
        "QGZ_ELEMENTS_PER_LOAD", "QGZ_MAX_GROUP", "LocoState", "all_to_all_quant_reduce", "check_qgz",
        "naive_all_to_all_quant_reduce", "qgz_applies", "qgz_groups",
    ),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
