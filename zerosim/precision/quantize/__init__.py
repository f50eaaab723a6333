"""Fewer bits than 16: fp8 with scales (torchao's and Transformer Engine's roundings, MXFP8 blocks) and DeepSpeed's
symmetric integer quantizer (ZeRO++ qwZ, qgZ), each rounding where its framework's kernel puts it.

    _fp8_scaling.py   scaled casts to fp8: amax, torchao's and TE's scales, the received values
    _fp8_recipes.py   fp8 scaling recipes as state machines (delayed, current, torchao dynamic, MXFP8)
    _fp8_blocks.py    MXFP8: 32-element blocks, each with a power-of-two E8M0 scale
    _int_quant.py     DeepSpeed's int8/int4 quantizer: groups, scales, packing, qgZ's swizzle
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._fp8_blocks": ("BLOCK", "block_count", "block_index", "mxfp8_dequantize", "mxfp8_quantize"),
    "._fp8_recipes": (
        "FP8_RECIPES", "DelayedScaling", "Float8CurrentScaling", "MXFP8BlockScaling", "TorchaoAmaxToScale",
        "TorchaoDynamic", "get_fp8_recipe",
    ),
    "._fp8_scaling": (
        "TORCHAO_SCALE_PATHS", "amax_of", "axiswise_scales", "floor_power_of_2", "scaled_cast", "te_scale",
        "torchao_amax_to_scale", "torchao_received", "torchao_scale",
    ),
    "._int_quant": (
        "Quantized", "deepspeed_groups", "dequantize", "group_scales", "pack_int4", "quantize", "swizzle_order",
        "to_integers", "unpack_int4",
    ),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
