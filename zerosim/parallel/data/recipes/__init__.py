"""The gradient recipes: each framework's way from N ranks' gradients to the one the optimizer reads, as data (the
reduction operator, its dtype, where it divides by N, the buckets), apart from the formats (the precision policy).

    _recipes.py           RECIPES, GradientRecipe: "seeds", "ddp", "deepspeed-zero12", "deepspeed-zero12-reduce",
                          "deepspeed-bf16-optimizer", "deepspeed-zero3", "fsdp2"
    _averaging.py         one place for averaging: accumulation format, the recipe's op, / (N·K), unscaling
    _divide_factors.py    FSDP2's pre/post divide factors; torch's scalar multiply and divide, bit for bit
    _param_buckets.py     which parameters share a gradient bucket: DDP's rule and DeepSpeed's (ipg)
    _ddp_reduce.py        DDP at stage 0: one all-reduce per bucket
    _bucket_allreduce.py  DeepSpeed ZeRO-1/2's default: each bucket all-reduced whole, in gradient-ready order
    _bf16_optimizer.py    DeepSpeed's BF16_Optimizer (bf16, fp32 accumulation, stage 1): the whole buffer at once

docs/recipes.md cites the framework code each follows (release, file and function).
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._averaging": ("accum_format", "accumulate", "after_reduce", "finish", "reduce_op"),
    "._bf16_optimizer": ("all_reduce_aligned", "check_engine"),
    "._bucket_allreduce": (
        "all_reduce_bucket", "bucket_slices", "call_chunks", "flat_chunks", "range_slices", "split_calls",
    ),
    "._ddp_reduce": ("ddp_all_reduce",),
    "._divide_factors": ("FSDP2DivideFactors", "fsdp2_divide_factors", "torch_scalar_div", "torch_scalar_mul"),
    "._param_buckets": (
        "DDP_BUCKET_CAP_MB", "DDP_FIRST_BUCKET_BYTES", "MIB", "DDPBuckets", "bucket_assignment_by_size", "ddp_buckets",
        "ipg_buckets", "ready_order", "registration",
    ),
    "._recipes": ("ALL_REDUCING", "ALLREDUCE_MAPS", "RECIPES", "GradientRecipe", "Recipe"),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
