"""N simulated ranks on one GPU (backend "cupy-sim"): the ring, the casts and the optimizers on the device give
the numpy simulator's bits; the engine's stages agree with each other on the device. Needs CuPy and a GPU.

Run on an H100 (tools/gpu_session.sh; docs/how-to/run-on-gpus.md has the versions and the results);
tests/test_array_namespace.py runs the same code path on the CPU through the NumPy stand-in. Where the
device could differ from the host, and what is done about it:
- the ring, the casts (bf16 through uint16 bits, fp16 native), stochastic rounding: every bit equal for finite
  inputs; a NaN may come out as CUDA's canonical NaN (0x7FFF...) where x86 keeps a payload;
- the optimizers' fp32 arithmetic: CuPy compiles elementwise kernels without fast math, so each +, -, *, /
  and sqrt rounds correctly, as NumPy's: every bit equal;
- the models' matmuls: the portable kernels (the default) round each exact dot product once, so the products are
  the CPU's bits; a sum over the batch (a bias's gradient, the loss) is CuPy's reduction, in another order than
  NumPy's (docs/gpu_run/2026-11-29/gradients.log), so the engine on the GPU is compared with the oracle whose
  forward/backward runs on the same GPU (`Reference(device=...)`), not with the CPU; the distance to the CPU run is
  printed;
- float32 subnormals: CuPy's kernels flush them (-ftz=true). Casts and bf16 adds go through float64 and keep
  them (zerosim/precision/cast/_subnormals.py); fp32 optimizer arithmetic and fp32 ring adds do not (a test below
  shows the difference, which docs/how-to/run-on-gpus.md states).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import bits  # the tests' shared helpers (tests/helpers.py)
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim import MLP, Cluster, Reference, ZeroEngine, get_optimizer
from zerosim.backends.cupy import BackendUnavailable, import_cupy
from zerosim.collectives import all_gather, all_reduce, reduce_scatter
from zerosim.optim import SGD, Adam, AdamW, Lion
from zerosim.precision import cast, get_format
from zerosim.precision.cast import device_namespace

try:
    cp, _nccl, DEVICES = import_cupy()
except BackendUnavailable as e:
    pytest.skip(f"GPU tests need CuPy and a CUDA device: {e}", allow_module_level=True)

NS = device_namespace(cp, "cupy")
ALL16 = np.arange(2**16, dtype=np.uint16)


def host_bits(a, fmt=None):
    return bits(NS.to_host(a, fmt))


def finite(x):
    return np.isfinite(np.asarray(x, dtype=np.float64))


@pytest.mark.parametrize("src", ["bf16", "fp16"])
@pytest.mark.parametrize("dst", ["fp64", "fp32", "fp16", "bf16"])
def test_casts_from_every_16_bit_pattern(src, dst):
    x = ALL16.view(get_format(src).dtype)
    with np.errstate(all="ignore"):
        want = cast(x, dst)
    got = NS.cast(NS.from_host(x), dst)
    keep = finite(want.astype(np.float64))  # NaN: canonical on the GPU
    assert np.array_equal(host_bits(got, dst)[keep], bits(want)[keep])


@pytest.mark.parametrize("dst", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_casts_from_float64(dst, rounding):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(200_000) * np.exp2(rng.integers(-150, 130, 200_000))
    u = rng.random(x.shape) if rounding == "stochastic" else None
    with np.errstate(all="ignore"):
        want = cast(x, dst, rounding=rounding, uniforms=u)
    got = NS.cast(cp.asarray(x), dst, rounding=rounding, uniforms=None if u is None else cp.asarray(u))
    assert np.array_equal(host_bits(got, dst), bits(want))


@settings(max_examples=60)
@given(n=st.integers(1, 16), length=st.integers(0, 5000), wire=st.sampled_from(["bf16", "fp16", "fp32"]),
       op=st.sampled_from(["sum", "avg", "avg_premul", "max"]), trace=st.sampled_from(["hop", "call"]),
       seed=st.integers(0, 2**16))
def test_ring_on_the_gpu_equals_the_numpy_simulator(n, length, wire, op, trace, seed):
    rng = np.random.default_rng(seed)
    xs = [(rng.standard_normal(length) * 300).astype(np.float32) for _ in range(n)]
    sim, dev = Cluster(n, trace=trace), Cluster(n, backend="cupy-sim", trace=trace)
    for fn in (reduce_scatter, all_reduce):
        want = fn(sim, xs, op=op, wire=wire)
        got = fn(dev, [cp.asarray(x) for x in xs], op=op, wire=wire)
        assert all(isinstance(g, cp.ndarray) for g in got)  # the results stayed on the device
        for w, g in zip(want, got):
            assert np.array_equal(bits(dev.backend.to_numpy(g)), bits(w))
    shards = [cast(x, wire) for x in xs]
    got = all_gather(dev, [NS.from_host(s) for s in shards])
    for w, g in zip(all_gather(sim, shards), got):
        assert np.array_equal(bits(dev.backend.to_numpy(g)), bits(w))
    assert sim.trace.log == dev.trace.log


@pytest.mark.parametrize("opt", [Adam(lr=1e-2), AdamW(lr=1e-2, weight_decay=0.1), SGD(lr=1e-2, momentum=0.9),
                                 Lion(lr=1e-3)], ids=lambda o: o.name)
@pytest.mark.parametrize("size", [1, 1000, 1 << 20])
def test_optimizers_on_the_gpu_equal_numpy(opt, size):
    rng = np.random.default_rng(size)
    w0, g = rng.standard_normal(size).astype(np.float32), rng.standard_normal(size).astype(np.float32)
    w, state = w0.copy(), {k: np.zeros_like(w0) for k in opt.state_names}
    dw, dstate = cp.asarray(w0), {k: cp.zeros(size, cp.float32) for k in opt.state_names}
    for t in (1, 2, 3):
        opt.step(w, g, state, t)
        opt.step(dw, cp.asarray(g), dstate, t)
    assert np.array_equal(bits(cp.asnumpy(dw)), bits(w))
    for k in state:
        assert np.array_equal(bits(cp.asnumpy(dstate[k])), bits(state[k])), k


@settings(max_examples=40)
@given(size=st.integers(0, 300_000), seed=st.integers(0, 2**16), scale=st.sampled_from([1e-6, 1.0, 1e4]),
       which=st.sampled_from(["adam", "adamw", "sgd", "lion"]))
def test_optimizers_on_the_gpu_equal_numpy_at_hypothesis_sizes(size, seed, scale, which):
    opt = {"adam": Adam(lr=1e-2), "adamw": AdamW(lr=1e-2, weight_decay=0.1), "sgd": SGD(lr=1e-2, momentum=0.9),
           "lion": Lion(lr=1e-3)}[which]
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal(size).astype(np.float32)
    g = (rng.standard_normal(size) * scale).astype(np.float32)  # no subnormal arises: see the ftz test below
    w, state = w0.copy(), {k: np.zeros_like(w0) for k in opt.state_names}
    dw, dstate = cp.asarray(w0), {k: cp.zeros(size, cp.float32) for k in opt.state_names}
    for t in (1, 2):
        opt.step(w, g, state, t)
        opt.step(dw, cp.asarray(g), dstate, t)
    assert np.array_equal(bits(cp.asnumpy(dw)), bits(w))
    for k in state:
        assert np.array_equal(bits(cp.asnumpy(dstate[k])), bits(state[k])), k


def _data(n, steps):
    return [[(np.random.default_rng(s * n + r).standard_normal((16, 64)).astype(np.float32),
              np.random.default_rng(1000 + s * n + r).standard_normal((16, 32)).astype(np.float32))
             for r in range(n)] for s in range(steps)]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("precision", ["fp32", "fp16-mixed"])
def test_the_engine_on_the_gpu_equals_the_oracle_on_the_gpu(stage, precision):
    # the oracle's forward/backward on the same device (cuBLAS, as the engine's); its reduction, scaler and
    # optimizer on the host, which the device's equal bit for bit (the tests above)
    n, steps, model = 4, 3, MLP([64, 256, 128, 32])
    params = model.init_params(np.random.default_rng(7))
    cluster = Cluster(n, backend="cupy-sim")
    engine = ZeroEngine(model, cluster, stage, get_optimizer("adam", lr=1e-3), precision, params=params)
    oracle = Reference(model, get_optimizer("adam", lr=1e-3), precision, n, params=params, device=NS,
                       reduce_every_micro_step=stage >= 2)
    cpu = Reference(model, get_optimizer("adam", lr=1e-3), precision, n, params=params)
    for batch in _data(n, steps):
        on_device = [(cp.asarray(x), cp.asarray(t)) for x, t in batch]
        assert engine.step(on_device) == oracle.step(on_device)
        cpu.step(batch)
    shards = [cluster.backend.to_numpy(m) for m in engine.master_shards()]
    master = engine.layout.unarrange(np.concatenate(shards)) if stage else shards[0]
    master = master[: model.num_params]
    assert np.array_equal(bits(master), bits(oracle.master()))
    differ = master != cpu.master()
    print(f"stage {stage} {precision}: GPU vs CPU after {steps} steps, {differ.mean():.1%} of masters differ, "
          f"largest {np.abs(master - cpu.master()).max():.3g} (the products are the CPU's bits; a bias's gradient, "
          "a sum over the batch, is CuPy's reduction, in another order than NumPy's)")


def test_bf16_subnormals_cross_the_ring_on_the_gpu_as_on_the_host():
    # bf16 below 2**-126 is a float32 subnormal, which CuPy's float32 kernels flush (-ftz=true); the device's
    # bf16 adds go through float64 (zerosim/precision/cast/_bf16_bits.py), so every bit still equals ml_dtypes'
    rng = np.random.default_rng(5)
    n, length = 4, 4096
    xs = [cast(rng.standard_normal(length) * 2.0**-128 * np.exp2(rng.integers(-4, 6, length)), "bf16")
          for _ in range(n)]
    assert any(((np.abs(x.astype(np.float64)) < 2.0**-126) & (x != 0)).any() for x in xs)  # subnormals are there
    sim, dev = Cluster(n), Cluster(n, backend="cupy-sim")
    for fn in (reduce_scatter, all_reduce):
        want = fn(sim, xs, op="sum", wire="bf16")
        got = fn(dev, [NS.from_host(x) for x in xs], op="sum", wire="bf16")
        for w, g in zip(want, got):
            assert np.array_equal(bits(dev.backend.to_numpy(g)), bits(w))


def test_cupy_float32_arithmetic_flushes_subnormals_as_the_readme_says():
    # the one difference left on the device: an fp32 optimizer step or fp32 ring add whose input or result is
    # below 2**-126 gives zero there (CuPy compiles with -ftz=true), the host keeps the subnormal
    tiny = np.float32(2.0**-130)
    assert float((cp.asarray(tiny) * cp.float32(1.0)).get()) == 0.0 and tiny * np.float32(1.0) == tiny
    opt = Adam(lr=1e-3)
    g = np.full(4, 1e-20, np.float32)  # v = (1 - beta2) g**2 = 1e-43: a float32 subnormal on the host
    w, state = np.ones(4, np.float32), {k: np.zeros(4, np.float32) for k in opt.state_names}
    dw, dstate = cp.asarray(w), {k: cp.zeros(4, cp.float32) for k in opt.state_names}
    opt.step(w, g, state, 1)
    opt.step(dw, cp.asarray(g), dstate, 1)
    assert (state["v"] > 0).all() and (cp.asnumpy(dstate["v"]) == 0).all()
