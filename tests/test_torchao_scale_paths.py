"""torchao's two paths to the fp8 all-gather's scale (issue 33, Build 5), read from torchao 0.18.0:
`precompute_float8_dynamic_scale_for_fsdp` (fsdp_utils.py: the clamp at EPS in the amax's dtype, fp16 capped at
65504) and, without it, `amax_to_scale` at every gather (float8_utils.py: the amax to float64 first, no cap); and an
empty FSDP2 shard, on which torchao 0.18 raises. Both functions were also checked bit for bit against torchao
0.18.0's own code under torch 2.13 (every 7th positive bf16, 410 fp16/fp32 amaxes; not part of this suite: torchao
is no dependency)."""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from zerosim import MLP, Cluster, Reference, ZeroEngine, get_optimizer
from zerosim.parallel.data.zeropp import Wire
from zerosim.precision import cast
from zerosim.precision.quantize import TORCHAO_SCALE_PATHS, get_fp8_recipe, torchao_amax_to_scale, torchao_scale

E12 = float(np.float32(1e-12))  # 9.9999998e-13: fp32's EPS, what the precompute path clamps an fp32 amax to

# amax (its dtype)            precompute S          amax_to_scale S       why
ROWS = [
    (np.float32(1.0), 448.0, 448.0),  # one exact division on both paths
    (np.float32(0.0), 4.48e14, 4.48e14),  # 448/fl32(1e-12) and 448/1e-12 differ by 2e-9 relative: one fp32 (ulp 2^25)
    (np.float16(1.0), 448.0, 448.0),
    (np.float16(0.0), 65504.0, 4.48e14),  # fp16(1e-12) = 0: 448/0 = inf, capped at fp16's max; float64 EPS instead
    (np.float16(2**-10), 65504.0, 458752.0),  # 448·2^10 = 458752 > 65504: capped on the precompute path only
    (np.float16(2**-24), 65504.0, float(np.float32(448 * 2**24))),  # the smallest fp16 subnormal
    (ml_dtypes.bfloat16(0.0), 4.4716592e14, 4.48e14),  # bf16(1e-12) = 1.00187e-12: EPS rounded to bf16 first
]


@pytest.mark.parametrize("amax, precompute, amax_to_scale", ROWS)
def test_the_two_paths_by_hand(amax, precompute, amax_to_scale):
    assert torchao_scale(amax) == np.float32(precompute)
    assert torchao_amax_to_scale(amax) == np.float32(amax_to_scale)
    assert TORCHAO_SCALE_PATHS == {"precompute_float8_dynamic_scale_for_fsdp": torchao_scale,
                                   "amax_to_scale": torchao_amax_to_scale}


def _exact(amax, eps) -> np.float32:
    """fl32(448 / max(amax, eps)) from exact rationals: one rounding (float64's 53 bits round the quotient once more
    first, which for 24-bit results is the same: the module docstring's Figueroa bound)."""
    return np.float32(float(Fraction(448) / max(Fraction(float(amax)), Fraction(eps))))


def test_every_positive_fp16_amax():
    """Every positive finite fp16: amax_to_scale is 448/a rounded once; the precompute path caps it at 65504 (and
    fp16 rounds EPS to 0): they differ exactly where 448/a > 65504, for a below 448/65504 = 0.00684: 7,936 of
    31,743 amaxes (every subnormal and every normal below 2^-8 · 1.75)."""
    a = np.arange(1, 0x7C00, dtype=np.uint16).view(np.float16)
    got_a, got_p = torchao_amax_to_scale(a), torchao_scale(a)
    want_a = np.array([_exact(x, 1e-12) for x in a], np.float32)
    assert got_a.tobytes() == want_a.tobytes()
    capped = np.array([Fraction(448) / Fraction(float(x)) > 65504 for x in a])
    assert got_p.tobytes() == np.where(capped, np.float32(65504), want_a).tobytes()
    assert int((got_p != got_a).sum()) == int(capped.sum()) == 7936


def test_bf16_amaxes_differ_below_the_bf16_eps_only():
    """bf16(1e-12) = 1.00187e-12 > 1e-12: every positive bf16 amax below it (11,148 of 32,639 finite) is clamped to
    a larger EPS on the precompute path; from it up, both are 448/a rounded once."""
    a = np.arange(1, 0x7F80, dtype=np.uint16).view(ml_dtypes.bfloat16)
    eps16 = cast(np.asarray(1e-12), "bf16")
    differ = torchao_scale(a) != torchao_amax_to_scale(a)
    assert int(differ.sum()) == int((a < eps16).sum()) == 11148
    assert np.array_equal(differ, a < eps16)


def test_fp32_amaxes_agree_on_both_paths():
    """For an fp32 amax the clamps are fl32(1e-12) and 1e-12, 2e-9 apart relative: one fp32 scale either way (a
    sample of 1 in 4,099 positive finite fp32 patterns, every one below EPS among them)."""
    a = np.arange(1, 0x7F800000, 4099, dtype=np.uint32).view(np.float32)
    assert torchao_scale(a).tobytes() == torchao_amax_to_scale(a).tobytes()


def _pair(wire_name, init, model):
    wire = Wire(fp8_all_gather=wire_name)
    engine = ZeroEngine(model, Cluster(2), 3, get_optimizer("sgd", lr=1e-3), "fp16-pure", params=init, wire=wire)
    oracle = Reference(model, get_optimizer("sgd", lr=1e-3), "fp16-pure", 2, init, wire=wire)
    return engine, oracle


def test_the_engine_takes_either_path_and_equals_the_oracle_on_each():
    """fp16 parameters (no master) of MLP([4, 8, 4]) scaled to amaxes near 1e-3: the precompute path caps S at
    65504, amax_to_scale does not, so the gathered weights and the masters differ; each engine equals the oracle
    with the same wire. amax_to_scale all-reduces a unit's amax before each of its gathers (forward and backward
    re-gather: 2 units × 2 gathers = 4 one-element all-reduces a step), the precompute path once a step; two steps,
    and the trace holds an all-reduce as its two phases (reduce-scatter, all-gather)."""
    model = MLP([4, 8, 4])
    init = model.init_params(np.random.default_rng(0)) * 1e-3
    masters, amax_calls = {}, {}
    for name in ("torchao", "torchao-amax_to_scale"):
        engine, oracle = _pair(name, init, model)
        rng = np.random.default_rng(1)
        for _ in range(2):
            batches = [(rng.standard_normal((2, 4)), rng.standard_normal((2, 4))) for _ in range(2)]
            assert engine.step(batches) == oracle.step(batches)
            assert engine.full_master().tobytes() == oracle.master()[: model.num_params].tobytes()
        masters[name] = engine.full_master()
        amax_calls[name] = sum(c.collective == "all_reduce" and c.tag.startswith("fp8 amax")
                               for c in engine.cluster.trace.calls)
    assert masters["torchao"].tobytes() != masters["torchao-amax_to_scale"].tobytes()
    assert amax_calls == {"torchao": 2 * 1 * 2, "torchao-amax_to_scale": 2 * 4 * 2}
    decision = get_fp8_recipe("torchao-amax_to_scale").update("forward", np.float16(2**-10))
    assert decision.scale_after == 458752.0 and get_fp8_recipe("torchao").update(
        "forward", np.float16(2**-10)).scale_after == 65504.0
    # the recipes keep a 16-bit amax's dtype (a bf16 amax is not widened to fp32 before the clamp)
    assert get_fp8_recipe("torchao").update("forward", ml_dtypes.bfloat16(0)).scale_after == np.float32(4.4716592e14)


@pytest.mark.bad_input("engine arguments", unchanged=True)
@pytest.mark.parametrize("wire", ["torchao", "torchao-amax_to_scale"])
def test_an_empty_fsdp2_shard_is_refused_as_torchao_raises(wire):
    """MLP([4, 3, 5]) with the fsdp2 recipe on 4 ranks: its first weight (3, 4) has 3 rows, FSDP2 gives rank 3 none,
    and torchao 0.18's amax of that empty shard raises (torch.max / torch._foreach_norm). Its (5, 3) weight on 4
    ranks (2, 2, 1, 0 rows) is empty on rank 3 too; the flat layouts' empty pieces are not FSDP2 shards and run."""
    cluster = Cluster(4)
    with pytest.raises(ValueError, match=r"empty shard .* w \(3, 4\) has 3 rows for 4 ranks, so rank\(s\) \[3\]"):
        ZeroEngine(MLP([4, 3, 5]), cluster, 3, get_optimizer("adam"), "bf16-mixed", recipe="fsdp2",
                   wire=Wire(fp8_all_gather=wire))
    assert all(not r.ledger.live for r in cluster.ranks) and not cluster.trace.calls
    ZeroEngine(MLP([4, 8, 8]), Cluster(4), 3, get_optimizer("adam"), "bf16-mixed", recipe="fsdp2",
               wire=Wire(fp8_all_gather=wire))  # 8 rows on 4 ranks: two each
    ZeroEngine(MLP([4, 3, 5]), Cluster(4), 3, get_optimizer("adam"), "bf16-mixed", wire=Wire(fp8_all_gather=wire))
