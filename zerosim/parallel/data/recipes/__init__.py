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

from zerosim.parallel.data.recipes._averaging import accum_format, finish, reduce_op
from zerosim.parallel.data.recipes._bucket_allreduce import all_reduce_bucket, bucket_slices, split_calls
from zerosim.parallel.data.recipes._ddp_reduce import ddp_all_reduce
from zerosim.parallel.data.recipes._divide_factors import (
                                                           FSDP2DivideFactors,
                                                           fsdp2_divide_factors,
                                                           torch_scalar_div,
                                                           torch_scalar_mul,
)
from zerosim.parallel.data.recipes._param_buckets import (
                                                           DDP_BUCKET_CAP_MB,
                                                           DDP_FIRST_BUCKET_BYTES,
                                                           MIB,
                                                           DDPBuckets,
                                                           bucket_assignment_by_size,
                                                           ddp_buckets,
                                                           ipg_buckets,
                                                           ready_order,
                                                           registration,
)
from zerosim.parallel.data.recipes._recipes import ALL_REDUCING, ALLREDUCE_MAPS, RECIPES, GradientRecipe, Recipe

__all__ = [
    "ALL_REDUCING", "ALLREDUCE_MAPS", "DDPBuckets", "DDP_BUCKET_CAP_MB", "DDP_FIRST_BUCKET_BYTES", "FSDP2DivideFactors",
    "MIB",
    "RECIPES", "GradientRecipe", "Recipe", "accum_format", "all_reduce_bucket", "bucket_assignment_by_size",
    "bucket_slices", "ddp_all_reduce", "ddp_buckets", "finish", "fsdp2_divide_factors", "ipg_buckets", "ready_order",
    "reduce_op", "registration", "split_calls", "torch_scalar_div", "torch_scalar_mul",
]
