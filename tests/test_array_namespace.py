"""The device path on the CPU: NumPy standing in for CuPy (bf16 as uint16, ml_dtypes refused) against the
numpy path, bit for bit — the bf16 bit operations, every cast, the ring, the optimizers and the engine.

The yardstick everywhere is today's code on NumPy with ml_dtypes (`cast`, ml_dtypes' own bf16 add, the
numpy simulator), which the rest of the suite checks against float64 and the oracle.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from helpers import bits
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Cluster
from zerosim.collectives import all_gather, all_reduce, nccl_all_reduce, reduce_scatter
from zerosim.models import MLP
from zerosim.optim import SGD, Adam, AdamW, Lion
from zerosim.parallel.data import ZeroEngine
from zerosim.precision import cast, get_format
from zerosim.precision.cast import NUMPY, numpy_standin
from zerosim.precision.cast import _bf16_bits as bf16_bits

BF16 = ml_dtypes.bfloat16
ALL16 = np.arange(2**16, dtype=np.uint16)  # every 16-bit pattern
# low halves of a float32 that decide its rounding to bf16: 0, just above 0, just below / at / above the
# midpoint, the all-ones, and two arbitrary ones
LOWS = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234, 0xC000], np.uint32)
ALL_F32_HIGHS = (np.arange(2**16, dtype=np.uint32)[:, None] << 16 | LOWS[None, :]).reshape(-1).view(np.float32)


def standin_cluster(n, **kw):
    return Cluster(n, backend="cupy-sim", xp="numpy-standin", **kw)


def host(cluster, a):
    return cluster.backend.to_numpy(a)


# -- bf16 through uint16 bit operations ----------------------------------------------------------------------------
def test_bf16_widen_is_mldtypes_widening_on_every_pattern():
    assert np.array_equal(bits(bf16_bits.widen(ALL16, np)), bits(ALL16.view(BF16).astype(np.float32)))


def test_bf16_round_is_mldtypes_cast_on_every_high_half_and_deciding_low_half():
    # 2**16 high halves x 8 low halves: every exponent, sign, NaN payload and the three rounding cases
    with np.errstate(invalid="ignore"):
        want = ALL_F32_HIGHS.astype(BF16).view(np.uint16)
    assert np.array_equal(bf16_bits.round_float32(ALL_F32_HIGHS, np), want)


@pytest.mark.parametrize("fn, ref", [(bf16_bits.add, np.add), (bf16_bits.maximum, np.maximum)])
def test_bf16_add_and_maximum_are_mldtypes_on_every_pattern_against_many_partners(fn, ref):
    rng = np.random.default_rng(7)
    partners = np.concatenate([rng.integers(0, 2**16, 24, dtype=np.uint16),
                               np.array([0, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x7F7F, 0x3F80], np.uint16)])
    for p in partners:
        b = np.full_like(ALL16, p)
        with np.errstate(all="ignore"):
            want = ref(ALL16.view(BF16), b.view(BF16)).view(np.uint16)
            got = fn(ALL16, b, np)
        # NOTE: where both inputs are NaN, IEEE 754 leaves which NaN comes out to the machine (x86 returns an
        # operand's, and a compiler may swap the operands of a commutative add; CUDA returns its canonical NaN):
        # there both answers must be NaN, not the same NaN
        both_nan = np.isnan(ALL16.view(BF16).astype(np.float32)) & np.isnan(b.view(BF16).astype(np.float32))
        assert np.array_equal(got[~both_nan], want[~both_nan]), f"partner {p:#06x}"
        assert np.isnan(got[both_nan].view(BF16).astype(np.float32)).all()


# -- casts on the stand-in against `cast` --------------------------------------------------------------------------
SI = numpy_standin()


def _as_bits(a):
    a = a.get() if hasattr(a, "get") else a  # the stand-in's arrays are its "device": .get() copies them back
    return a if a.dtype == np.uint16 else bits(a)


def dev(a):
    """A host array on the stand-in's device (its arrays refuse host arrays in arithmetic, as CuPy's do)."""
    return SI.xp.asarray(a)


@pytest.mark.parametrize("src", ["bf16", "fp16"])
@pytest.mark.parametrize("dst", ["fp64", "fp32", "fp16", "bf16"])
def test_cast_from_every_16_bit_pattern(src, dst):
    x = ALL16.view(get_format(src).dtype)
    held = ALL16 if src == "bf16" else x  # the stand-in holds bf16 as its bits
    with np.errstate(all="ignore"):
        assert np.array_equal(_as_bits(SI.cast(dev(held), dst)), bits(cast(x, dst)))


@pytest.mark.parametrize("dst", ["bf16", "fp16"])
def test_cast_from_float32_high_halves(dst):
    with np.errstate(all="ignore"):
        assert np.array_equal(_as_bits(SI.cast(dev(ALL_F32_HIGHS), dst)), bits(cast(ALL_F32_HIGHS, dst)))


def _float64_samples():
    """Random magnitudes over every exponent bf16/fp16/fp32 reach, plus the double-rounding traps:
    a bf16 midpoint plus or minus a float64 ulp-sized nudge below float32's precision."""
    rng = np.random.default_rng(3)
    wide = rng.standard_normal(20000) * np.exp2(rng.integers(-150, 130, 20000))
    mids = (1 + 2.0**-8) * np.exp2(rng.integers(-130, 127, 2000))
    traps = np.concatenate([mids + mids * 2.0**-40, mids - mids * 2.0**-40, -mids, mids])
    return np.concatenate([wide, traps, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, -1e-300]])


@pytest.mark.parametrize("dst", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("saturate", [False, True])
def test_cast_from_float64(dst, rounding, saturate):
    x = _float64_samples()
    u = np.random.default_rng(5).random(x.shape) if rounding == "stochastic" else None
    with np.errstate(all="ignore"):
        got = SI.cast(dev(x), dst, rounding=rounding, uniforms=u, saturate=saturate)
        want = cast(x, dst, rounding=rounding, uniforms=u, saturate=saturate)
    assert np.array_equal(_as_bits(got), bits(want))


def test_cast_from_float32_stochastic():
    x = ALL_F32_HIGHS[np.isfinite(ALL_F32_HIGHS)]
    u = np.random.default_rng(9).random(x.shape)
    for dst in ("bf16", "fp16"):
        with np.errstate(all="ignore"):
            got = SI.cast(dev(x), dst, rounding="stochastic", uniforms=u)
            want = cast(x, dst, rounding="stochastic", uniforms=u)
        assert np.array_equal(_as_bits(got), bits(want)), dst


def test_the_seeds_double_rounding_case_rounds_once():
    assert SI.cast(dev(np.array([1 + 2**-8 + 2**-40])), "bf16").get().view(BF16)[0] == 1.0078125


def test_the_standin_refuses_mldtypes():
    with pytest.raises(TypeError, match="ml_dtypes"):
        SI.xp.add(np.ones(2, BF16), np.ones(2, BF16))
    with pytest.raises(TypeError, match="ml_dtypes"):
        SI.xp.empty(3, dtype=BF16)
    assert SI.storage("bf16") == np.uint16 and SI.storage("fp16") == np.float16
    with pytest.raises(NotImplementedError, match="fp8_e4m3"):
        SI.storage("fp8_e4m3")


def test_numpy_namespace_is_the_old_path():
    assert NUMPY.is_numpy and NUMPY.storage("bf16") == np.dtype(BF16)
    x = np.random.default_rng(0).standard_normal(100)
    assert np.array_equal(bits(NUMPY.cast(x, "bf16")), bits(cast(x, "bf16")))


# -- the ring on the stand-in against the numpy simulator ----------------------------------------------------------
@given(n=st.integers(1, 16), length=st.integers(0, 70), wire=st.sampled_from(["bf16", "fp16", "fp32"]),
       op=st.sampled_from(["sum", "max", "avg", "avg_premul", "avg_predivide"]), trace=st.sampled_from(["hop", "call"]),
       seed=st.integers(0, 2**16))
def test_ring_on_standin_equals_numpy_simulator(n, length, wire, op, trace, seed):
    rng = np.random.default_rng(seed)
    xs = [(rng.standard_normal(length) * 300).astype(np.float32) for _ in range(n)]
    a, b = Cluster(n, trace=trace), standin_cluster(n, trace=trace)
    for fn in (reduce_scatter, all_reduce):
        want = fn(a, [x.copy() for x in xs], op=op, wire=wire)
        got = fn(b, [b.backend.asarray(x, np.float32) for x in xs], op=op, wire=wire)
        for w, g in zip(want, got):
            assert np.array_equal(bits(host(b, g)), bits(w))
    if op == "sum":
        want = nccl_all_reduce(a, [x.copy() for x in xs], wire=wire, chunk_bytes=16)
        got = nccl_all_reduce(b, [b.backend.asarray(x, np.float32) for x in xs], wire=wire, chunk_bytes=16)
        assert all(np.array_equal(bits(host(b, g)), bits(w)) for w, g in zip(want, got))
    shards = [cast(x, wire) for x in xs]
    want = all_gather(a, shards)
    got = all_gather(b, [b.backend.asarray(s, get_format(wire).dtype) for s in shards])
    assert all(np.array_equal(bits(host(b, g)), bits(w)) for w, g in zip(want, got))
    assert a.trace.log == b.trace.log


def test_ring_on_standin_keeps_bf16_as_bits():
    c = standin_cluster(3)
    out = reduce_scatter(c, [dev(np.ones(6, np.float32)) for _ in range(3)], wire="bf16")
    assert all(o.dtype == np.uint16 for o in out)
    assert host(c, out[0]).dtype == np.dtype(BF16) and float(host(c, out[0])[0]) == 3.0


# -- optimizers and the engine -------------------------------------------------------------------------------------
@pytest.mark.parametrize("opt", [Adam(lr=1e-2), AdamW(lr=1e-2, weight_decay=0.1), SGD(lr=1e-2, momentum=0.9),
                                 Lion(lr=1e-3)], ids=lambda o: o.name)
@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_optimizer_and_rounding_into_bf16_on_standin(opt, rounding):
    """The fp32 update on the device, then the master rounded into its 16-bit copy there (bits for bf16)."""
    rng = np.random.default_rng(1)
    w0, g = rng.standard_normal(257).astype(np.float32), rng.standard_normal(257).astype(np.float32)
    outs = []
    for ns in (NUMPY, SI):
        w, state = ns.xp.asarray(w0.copy()), {k: ns.xp.zeros(w0.shape, np.float32) for k in opt.state_names}
        for t in (1, 2, 3):
            opt.step(w, ns.xp.asarray(g), state, t)
        u = np.random.default_rng(2).random(w.shape) if rounding == "stochastic" else None
        outs.append((_as_bits(w), _as_bits(ns.cast(w, "bf16", rounding=rounding, uniforms=u))))
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("precision", ["fp16-mixed", "fp32"])
def test_engine_on_standin_equals_numpy_simulator(stage, precision):
    model, rng = MLP([8, 16, 4]), np.random.default_rng(0)
    steps = [[(rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32))
              for _ in range(3)] for _ in range(3)]
    held = []
    for cluster in (Cluster(3), standin_cluster(3)):
        engine = ZeroEngine(model, cluster, stage, Adam(lr=1e-2), precision=precision)
        to = (lambda a: a) if cluster.backend.name == "numpy" else dev  # the batches where the ranks are
        losses = [engine.step([(to(x), to(t)) for x, t in b]) for b in steps]
        held.append((losses, [bits(host(cluster, r.params.array)) for r in cluster.ranks],
                     [bits(host(cluster, m)) for m in engine.master_shards()], cluster.trace.log))
    assert held[0][0] == held[1][0]
    assert all(np.array_equal(x, y) for x, y in zip(held[0][1], held[1][1]))
    assert all(np.array_equal(x, y) for x, y in zip(held[0][2], held[1][2]))
    assert held[0][3] == held[1][3]


@pytest.mark.bad_input("cluster and backends", unchanged=True)
def test_engine_refuses_bf16_where_bf16_is_bits():
    cluster = standin_cluster(2)
    with pytest.raises(NotImplementedError, match="bf16.*store as bits"):
        ZeroEngine(MLP([4, 4]), cluster, 2, Adam(), precision="bf16-mixed")
    assert all(not r.ledger.live for r in cluster.ranks)


@pytest.mark.bad_input("cluster and backends")
def test_cupy_sim_without_cupy_says_what_is_missing():
    try:
        import cupy  # noqa: F401
    except Exception:
        pass
    else:
        pytest.skip("CuPy is installed here")
    from zerosim.backends.cupy import BackendUnavailable

    with pytest.raises(BackendUnavailable, match="cupy-sim backend needs CuPy"):
        Cluster(2, backend="cupy-sim")
    with pytest.raises(ValueError, match="xp must be one of"):
        Cluster(2, backend="cupy-sim", xp="jax")


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_the_oracle_with_its_forward_backward_on_the_standin_equals_the_engine_on_cupy_sim(stage):
    # the GPU test's shape (tests/gpu/test_device_ranks.py), run through the stand-in: the oracle's device
    # plumbing (weights to the device, gradients back) and the engine's give the same bits
    from zerosim import MLP, Adam, Cluster, Reference, ZeroEngine

    n, model = 2, MLP([8, 16, 4])
    rng = np.random.default_rng(stage)
    data = [[(rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32))
             for _ in range(n)] for _ in range(2)]
    params = model.init_params(np.random.default_rng(7))
    cluster = Cluster(n, backend="cupy-sim", xp="numpy-standin")
    engine = ZeroEngine(model, cluster, stage, Adam(lr=1e-2), "fp16-mixed", params=params)
    oracle = Reference(model, Adam(lr=1e-2), "fp16-mixed", n, params=params, device=cluster.backend.xp,
                       reduce_every_micro_step=stage >= 2)
    for batch in data:
        on_device = [(dev(x), dev(t)) for x, t in batch]
        assert engine.step(on_device) == oracle.step(on_device)
    shards = [cluster.backend.to_numpy(m) for m in engine.master_shards()]
    master = engine.layout.unarrange(np.concatenate(shards)) if stage else shards[0]  # stage 0: each rank has all
    assert np.array_equal(master[: model.num_params].view(np.uint32), oracle.master().view(np.uint32))


@pytest.mark.bad_input("cluster and backends", unchanged=True)
def test_the_oracle_refuses_a_device_that_is_not_a_namespace():
    from zerosim import Adam, Reference

    with pytest.raises(TypeError, match="device must be an ArrayNamespace.*'cupy'"):
        Reference(MLP([4, 4]), Adam(), "fp32", 2, device="cupy")
