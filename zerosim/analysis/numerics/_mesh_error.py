"""How far HSDP's and FULL_SHARD's averaged gradients land from the exact one, as the replicate degree R grows.

Letters: N = S·R ranks (S per shard group, R replicas), K micro-steps, u the unit roundoff of the reduce dtype
(fp16 2^-11, bf16 2^-8, fp32 2^-24), γ_k = k·u / (1 − k·u) (Higham, Accuracy and Stability, Lemma 3.1).

The inputs: every rank's K micro-batch gradients in the compute format; the path: the oracle's
(reference/_mesh_reduce.py, bitwise the engines' by tests/test_mesh_oracle.py) with FSDP2's recipe, then
`averaging.finish` (÷K in fp32). The exact average is the same inputs summed in float64 (exact here: at most a
few hundred 16-bit terms). With S, R and K powers of two FSDP2's divisions (NCCL AVG's ×fl(1/S), ×fl(1/R), the
fp16 pre- and post-divides) are exact, so the only roundings are the additions, in a binary tree whose depth
for each input is:

    FULL_SHARD          the world's ring: N − 1 additions in the reduce dtype, every micro-step
    HSDP                its shard group's ring (S − 1), then the replicate ring (R − 1): S + R − 2
    HSDP, no sync       S − 1, then the K micro-steps' partial sums (K − 1), then R − 1: S + R + K − 3,
                        all in the reduce dtype (FSDP2's partial_reduce_output)

and FULL_SHARD and HSDP then add the K micro-steps in fp32 (the sharded gradient's dtype). A sum computed by a
tree in which input i passes through d_i roundings errs by at most Σ_i γ_{d_i}·|x_i| (Higham, eq. 4.3, the same
argument node by node), so, writing A = Σ|x| / (N·K) for the average of the magnitudes,

    |ĝ − g| ≤ (γ_d(u) + γ_K(u32) + γ_d(u)·γ_K(u32)) · A        d the depth above, γ_K(u32) the fp32 adds and ÷K

`bound` gives it; `mesh_errors` measures the worst |ĝ − g| / A over the elements. The FULL_SHARD bound grows
with N − 1 = S·R − 1, HSDP's with S + R − 2: the replicate degree adds one rounding per replica, not S.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.parallel.data import STRATEGIES
from zerosim.parallel.data.layouts import ParamLayout
from zerosim.parallel.data.recipes import GradientRecipe
from zerosim.parallel.data import recipes as averaging  # averaging's one place (recipes/_averaging.py), by its face
from zerosim.precision import cast, get_format, get_precision
from zerosim.reference import reduce_on_mesh

FP32_U = 2.0**-24


@dataclass(frozen=True)
class MeshError:
    """One strategy at one (S, R, K): the worst error of the averaged gradient, relative to A, and its bound."""

    strategy: str  # "full_shard", "hsdp", "hsdp_no_sync"
    reduce: str  # the reduce dtype's format name
    shards: int  # S
    replicas: int  # R
    micro_steps: int  # K
    worst: float  # max over elements of |ĝ − g| / A
    rms: float  # sqrt(mean(|ĝ − g|²)) / sqrt(mean(A²))
    bound: float  # (γ_d + γ_K(fp32) + γ_d·γ_K(fp32)), d the additions above


def gamma(k: int, u: float) -> float:
    """γ_k = k·u / (1 − k·u)."""
    return k * u / (1 - k * u)


def depth(strategy: str, shards: int, replicas: int, micro_steps: int) -> int:
    """The additions an input passes through in the reduce dtype (the module docstring's table)."""
    n = shards * replicas
    return {"full_shard": n - 1, "hsdp": shards + replicas - 2,
            "hsdp_no_sync": shards + replicas + micro_steps - 3}[strategy]


def bound(strategy: str, reduce: str, shards: int, replicas: int, micro_steps: int) -> float:
    u = get_format(reduce).unit_roundoff
    d, k = gamma(depth(strategy, shards, replicas, micro_steps), u), gamma(micro_steps, FP32_U)
    return d + k + d * k


def mesh_average(grads_by_step: list, strategy: str, shards: int, policy) -> np.ndarray:
    """The fp32 average the strategy hands the optimizer for one flat parameter (FSDP2's recipe, its dim-0 chunks),
    along the oracle's path. FULL_SHARD is HSDP with one shard group of all N ranks (R = 1)."""
    length, n = grads_by_step[0][0].shape[0], len(grads_by_step[0])
    shards = n if strategy == "full_shard" else shards
    plan = STRATEGIES["hsdp" if strategy == "full_shard" else strategy]
    recipe = GradientRecipe("fsdp2")
    layout = ParamLayout((length,), ((0, length),), shards, (length,))
    reduced = reduce_on_mesh(grads_by_step, policy, recipe, layout, plan, length, "ring")
    return averaging.finish(reduced, policy, n, len(grads_by_step), 1.0, recipe=recipe)


def mesh_errors(strategies, reduce: str, shards: int, replicas_list, micro_steps: int = 1, length: int = 2048,
                seed: int = 0, mean: float = 0.0) -> list:
    """[MeshError] for each strategy at each R of `replicas_list`: the same inputs for all strategies at one R."""
    compute = "bf16" if reduce in ("bf16", "fp32") else reduce
    policy = get_precision(f"{compute}-mixed").with_(reduce=reduce)
    out = []
    for replicas in replicas_list:
        n = shards * replicas
        rng = np.random.default_rng([seed, n, micro_steps, length])
        grads = [[cast(rng.standard_normal(length) + mean, policy.compute_format) for _ in range(n)]
                 for _ in range(micro_steps)]
        wide = np.array([[g.astype(np.float64) for g in step] for step in grads])  # (K, N, L)
        exact = wide.sum(axis=(0, 1)) / (n * micro_steps)
        size = np.abs(wide).sum(axis=(0, 1)) / (n * micro_steps)  # A per element
        for strategy in strategies:
            err = np.abs(mesh_average(grads, strategy, shards, policy).astype(np.float64) - exact)
            out.append(MeshError(strategy, reduce, shards, replicas, micro_steps, float(np.max(err / size)),
                                 float(np.sqrt(np.mean(err**2) / np.mean(size**2))),
                                 bound(strategy, reduce, shards, replicas, micro_steps)))
    return out
