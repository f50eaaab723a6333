"""The gradient recipes as data: each framework's way from N ranks' gradients to the optimizer's, by name.

A `Recipe` row says what the framework does before the wire (its division), what it does to each reduced
piece (`after`), whether it divided by N already, which ZeRO plans it runs at, and which layout its
framework shards by. `GradientRecipe` is the configuration an engine and the oracle take beside the
precision policy: the recipe's name and the all-reduce's chunk map. What each recipe's arithmetic is,
step by step with its source, is in _averaging.py's docstring and docs/recipes.md; FSDP2's divide factors
and torch's scalar division bits are in _divide_factors.py beside it.
"""

from __future__ import annotations

from collections.abc import Callable

from zerosim._dataclass import dataclass
from zerosim.collectives import ReduceOp, add, get_op, premul_reciprocal
from zerosim.parallel.data._plan import PLANS
from zerosim.parallel.data.recipes import _bf16_optimizer as bf16_optimizer
from zerosim.parallel.data.recipes._divide_factors import fsdp2_divide_factors, torch_scalar_div, torch_scalar_mul
from zerosim.precision import ALLREDUCES, REDUCTIONS, Format, cast, get_format


@dataclass(frozen=True)
class Recipe:
    """One framework's way from the ranks' gradients to the optimizer's: see the module docstring."""

    name: str
    runs_at: Callable  # (Plan) -> True where the framework it follows does this (`stages` lists them)
    follows: str  # the function of the framework's code it follows
    op: Callable  # (policy, N) -> the collective's ReduceOp
    after: Callable | None  # (reduced piece, policy, N) -> the gradient as the framework keeps it; None: as reduced
    divides_by_n: bool  # False: finish divides by N (after the cast to fp32); True: the recipe divided already
    partition: str = "flat"  # the layout its framework shards by: "flat" (_flat.py), "per-parameter" or
    #                          "per-parameter dim 0" (_partition.py)
    collective: str = "reduce-scatter"  # how stages 1/2 move a bucket: "reduce-scatter" to the owners (_reduce.py),
    #                                     "bucket all-reduce" of the whole bucket (_bucket_allreduce.py), or "aligned
    #                                     all-reduce" of the whole gradient buffer at once (_bf16_optimizer.py)
    requires: Callable = lambda plan, policy: None  # (Plan, policy) -> why its framework runs something else there
    framework: str | None = None  # whose code it follows ("deepspeed", "fsdp2", "ddp"); None: the seeds' own protocol

    @property
    def stages(self) -> tuple:
        """The ZeRO stages whose plans it runs at."""
        return tuple(stage for stage, plan in PLANS.items() if self.runs_at(plan))

    def reduced_format(self, policy) -> Format:
        """The format `after` leaves the reduced gradient in (what stages 2/3 accumulate it in)."""
        if self.name.startswith("deepspeed-zero12"):  # DeepSpeed 0.19.8, stage_1_and_2.py:
            # grad_accum_dtype fp32: added as reduced to the fp32 partition (_add_to_grad_partition_buffer);
            # else copied back into the 16-bit bucket (allreduce_and_copy_with_multiple_ranks, `buf.copy_`)
            return get_format(policy.grad_accum) if policy.grad_accum is not None else policy.compute_format
        if self.name == bf16_optimizer.NAME:
            return get_format("fp32")  # copied back into its fp32 gradient buffer
        if self.name == "deepspeed-zero3":  # `.to(gradient_accumulation_dtype)`: grad_accum_dtype, else the model's
            return get_format(policy.grad_accum) if policy.grad_accum is not None else policy.compute_format
        if self.name == "fsdp2":
            return policy.master_format or policy.compute_format  # `.to(orig_dtype)`: the sharded parameter's dtype
        return policy.reduce_format


def _ddp_op(policy, n: int) -> ReduceOp:
    return ReduceOp("ddp_sum", add, "x * fl32(1/N) rounded to x's dtype (DDP's bucket copy), then sum",
                    before_wire=lambda x, n: torch_scalar_mul(x, 1.0 / n))


def _deepspeed_zero12_op(policy, n: int) -> ReduceOp:
    return ReduceOp("ds_predivide_sum", add, "x.div_(N) on CUDA in x's dtype, cast to the wire, then sum",
                    before_wire=lambda x, n: torch_scalar_div(x, n, "cuda"))


def _deepspeed_zero12_after(piece, policy, n: int):
    """allreduce_bucket: the reduced tensor is copied back into the 16-bit bucket (`tensor.copy_(...)`); with
    grad_accum_dtype fp32 DeepSpeed 0.19.8 adds it, as it came off the wire, to the fp32 partition instead."""
    fmt = RECIPES["deepspeed-zero12"].reduced_format(policy)
    return piece if piece.dtype == fmt.dtype else cast(piece, fmt)


def _deepspeed_zero12_requires(plan, policy) -> str | None:
    """DeepSpeed runs bf16 + grad_accum_dtype fp32 at stage 1 through BF16_Optimizer, not stage_1_and_2.py."""
    if plan.shards("grads") or (policy.compute, policy.grad_accum) != ("bf16", "fp32"):
        return None
    return ("DeepSpeed runs bf16 parameters with grad_accum_dtype fp32 at ZeRO stage 1 through BF16_Optimizer, not "
            "stage_1_and_2.py (0.19.6 and 0.19.8: runtime/engine.py, _do_optimizer_sanity_check returns BFLOAT16): "
            f"use reduction={bf16_optimizer.NAME!r}")


def _deepspeed_zero3_op(policy, n: int) -> ReduceOp:
    # __avg_scatter_grads casts to communication_data_type first; reduce_scatter_coalesced then divides the
    # interleaved buffer: `tensor_partition_flat_buffer.div_(world_sz)  # pre-divide` (on CUDA, in the wire dtype)
    return ReduceOp("ds3_predivide_sum", add, "cast to the wire, x.div_(N) on CUDA in the wire dtype, then sum",
                    on_wire=lambda x, n: torch_scalar_div(x, n, "cuda"))


def _deepspeed_zero3_after(piece, policy, n: int):
    """__avg_scatter_grads: `g.to(self.gradient_accumulation_dtype)` when the wire differs from it."""
    fmt = RECIPES["deepspeed-zero3"].reduced_format(policy)
    return piece if piece.dtype == fmt.dtype else cast(piece, fmt)


def _fsdp2_op(policy, n: int) -> ReduceOp:
    f = fsdp2_divide_factors(n, policy.reduce_format.name)
    if f.reduce_scatter_op == "avg":  # NCCL's ncclAvg: PreMulSum by fl(1/N), rounded to the wire dtype
        return ReduceOp(
            "fsdp2_avg", add, "NCCL AVG: x * fl(1/N) in the wire dtype, then sum", on_wire=premul_reciprocal
        )
    if f.pre is None or f.pre == 1:
        return get_op("sum")
    return ReduceOp("fsdp2_predivide_sum", add, f"x.div_({f.pre:g}) on CUDA in the wire dtype, then sum",
                    on_wire=lambda x, n, pre=f.pre: torch_scalar_div(x, pre, "cuda"))


def _fsdp2_after(piece, policy, n: int):
    """foreach_reduce: `_div_if_needed(reduce_output, postdivide_factor)`, then `.to(orig_dtype)`."""
    f = fsdp2_divide_factors(n, policy.reduce_format.name)
    if f.post is not None and f.post != 1:
        piece = torch_scalar_div(piece, f.post, "cuda")
    orig = policy.master_format or policy.compute_format
    return piece if piece.dtype == orig.dtype else cast(piece, orig)


def _anywhere(plan) -> bool:
    return True


def _unsharded(plan) -> bool:  # DDP: plain data parallel
    return not plan.sharded


def _zero12(plan) -> bool:  # DeepSpeed ZeRO-1/2: optimizer state (and gradients) sharded, params whole
    return plan.shards("optimizer") and not plan.shards("params")


def _zero1(plan) -> bool:  # ZeRO-1: optimizer state sharded, gradients and params whole
    return plan.shards("optimizer") and not plan.shards("grads")


def _params_sharded(plan) -> bool:  # DeepSpeed ZeRO-3, FSDP2: parameters sharded at rest
    return plan.shards("params")


RECIPES = {
    r.name: r
    for r in (
        Recipe(
            "seeds",
            _anywhere,
            "the seeds' protocol (seed 000, ZeRO-1 step by step)",
            lambda p, n: get_op("sum"),
            None,
            False,
        ),
        Recipe(
            "ddp",
            _unsharded,
            "torch/csrc/distributed/c10d/reducer.cpp: Reducer::mark_variable_ready_dense",
            _ddp_op,
            None,
            True,
            framework="ddp",
        ),
        Recipe(  # DeepSpeed's default: use_multi_rank_bucket_allreduce=True (zero/config.py)
            "deepspeed-zero12",
            _zero12,
            "deepspeed/runtime/zero/stage_1_and_2.py: average_tensor, allreduce_and_scatter, allreduce_bucket "
            "(dist.all_reduce of each bucket)",
            _deepspeed_zero12_op,
            _deepspeed_zero12_after,
            True,
            collective="bucket all-reduce",
            requires=_deepspeed_zero12_requires,
            framework="deepspeed",
        ),
        Recipe(  # use_multi_rank_bucket_allreduce=False: each slice reduced to its owner
            "deepspeed-zero12-reduce",
            _zero12,
            "deepspeed/runtime/zero/stage_1_and_2.py: average_tensor, allreduce_no_retain, allreduce_bucket "
            "(dist.reduce to the owner)",
            _deepspeed_zero12_op,
            _deepspeed_zero12_after,
            True,
            requires=_deepspeed_zero12_requires,
            framework="deepspeed",
        ),
        Recipe(  # bf16 + grad_accum_dtype fp32 at stage 1: DeepSpeed's engine picks BF16_Optimizer
            bf16_optimizer.NAME,
            _zero1,
            "deepspeed/runtime/bf16_optimizer.py: BF16_Optimizer (engine.py: allreduce_gradients, "
            "buffered_allreduce_fallback, allreduce_bucket)",
            bf16_optimizer.op,
            bf16_optimizer.after,
            True,
            collective="aligned all-reduce",
            requires=bf16_optimizer.requires,
            framework="deepspeed",
        ),
        Recipe(
            "deepspeed-zero3",
            _params_sharded,
            "deepspeed/runtime/zero/stage3.py: __avg_scatter_grads "
            "(coalesced_collectives.py: reduce_scatter_coalesced)",
            _deepspeed_zero3_op,
            _deepspeed_zero3_after,
            True,
            "per-parameter",
            framework="deepspeed",
        ),
        Recipe(
            "fsdp2",
            _params_sharded,
            "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_reduce",
            _fsdp2_op,
            _fsdp2_after,
            True,
            "per-parameter dim 0",
            framework="fsdp2",
        ),
    )
}
assert tuple(RECIPES) == REDUCTIONS, "precision/_policy.py lists the recipes' names to check input"
ALL_REDUCING = ("bucket all-reduce", "aligned all-reduce")  # the collectives whose chunk map `allreduce` picks
ALLREDUCE_MAPS = ALLREDUCES  # "ring": reduce-scatter + all-gather over the N shards; "nccl": NCCL's runRing chunk map;
#                             "gloo": gloo's ring (collectives/chunk_maps/_gloo.py)


@dataclass(frozen=True)
class GradientRecipe:
    """How the N ranks' gradients become the one the optimizer reads, apart from the formats (the precision policy):
    the framework's recipe by name, the all-reduce's chunk map, and — following from the recipe — the partition
    layout it shards by. Example: ``GradientRecipe("fsdp2")`` (stage 3, FSDP2's dim-0 chunks and divide factors).

    A `MixedPrecision` may name the same two choices as a shorthand (``with_(reduction="fsdp2")``, `--reduction`):
    `GradientRecipe.of(policy)` reads them from there; an engine given both checks that they agree.
    """

    reduction: str = "seeds"  # RECIPES: "seeds", "ddp", "deepspeed-zero12", "deepspeed-zero12-reduce", ...
    allreduce: str = "ring"  # an all-reduce's chunk map: "ring", "nccl" (collectives/chunk_maps/_nccl.py) or "gloo"

    def __post_init__(self):
        if self.reduction not in RECIPES:
            raise ValueError(f"unknown reduction recipe {self.reduction!r}; choose one of {tuple(RECIPES)}")
        if self.allreduce not in ALLREDUCE_MAPS:
            raise ValueError(f"unknown allreduce {self.allreduce!r}; choose one of {ALLREDUCE_MAPS}")

    @classmethod
    def of(cls, policy, recipe: "GradientRecipe | str | None" = None) -> "GradientRecipe":
        """`recipe` (a GradientRecipe, or a recipe's name), checked against the shorthand `policy` may carry;
        None: the policy's shorthand (the defaults "seeds" and "ring" when it names none)."""
        named = cls(getattr(policy, "reduction", "seeds"), getattr(policy, "allreduce", "ring"))
        if recipe is None:
            return named
        recipe = cls(recipe) if isinstance(recipe, str) else recipe
        if not isinstance(recipe, cls):
            raise TypeError(f"recipe must be a GradientRecipe or a recipe's name, got {recipe!r}")
        if named != cls() and named != recipe:
            raise ValueError(f"the precision policy names {named} but recipe= is {recipe}: name the recipe once")
        return recipe

    @property
    def rules(self) -> Recipe:
        """The recipe's arithmetic and where it runs (RECIPES)."""
        return RECIPES[self.reduction]

    @property
    def partition(self) -> str:
        """The layout its framework shards by: "flat", "per-parameter" or "per-parameter dim 0"."""
        return self.rules.partition

    def check(self, plan, policy, buckets: bool = False) -> None:
        """Raise ValueError unless this recipe (and its all-reduce chunk map) can run on `plan` with `policy`."""
        r = self.rules
        if not r.runs_at(plan):
            fits = ", ".join(name for name, x in RECIPES.items() if x.runs_at(plan))
            raise ValueError(f"reduction {r.name!r} follows {r.follows}, which runs at ZeRO stage(s) "
                             f"{'/'.join(map(str, r.stages))}, not {plan.stage}; at stage {plan.stage} choose one of: "
                             f"{fits}")
        why = r.requires(plan, policy)
        if why is not None:
            raise ValueError(why)
        if r.name == "ddp" and policy.reduce_format != policy.compute_format:
            raise ValueError(f"reduction 'ddp' all-reduces in the gradient's own dtype ({policy.compute}); "
                             f"drop reduce={policy.reduce!r} (DDP's compress hooks are not modelled)")
        if r.name == "ddp" and buckets:
            raise ValueError("reduction 'ddp' forms DDP's own buckets (_param_buckets.py), capped by "
                             "CommSchedule(bucket_cap_mb=...): drop reduce_bucket_size (DeepSpeed's knob)")
        all_reduces = r.collective in ALL_REDUCING or plan.end_reduction(True) == "all_reduce"
        if self.allreduce != "ring" and not all_reduces:
            raise ValueError(f"allreduce={self.allreduce!r} picks an all-reduce's chunk map, but reduction {r.name!r} "
                             f"at stage {plan.stage} reduce-scatters to the owners: drop allreduce")
        if self.allreduce != "ring" and buckets and r.collective not in ALL_REDUCING:
            raise ValueError(f"allreduce={self.allreduce!r} all-reduces the whole gradient in one call: the chunk map "
                             f"of each bucket would differ (and so would the bits); drop reduce_bucket_size")
