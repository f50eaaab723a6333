"""N simulated ranks on one GPU (backend "cupy-sim"): the ring, the casts and the optimizers on the device give
the numpy simulator's bits; the engine's stages agree with each other on the device. Needs CuPy and a GPU.

NEVER RUN YET: written without a GPU (tests/test_array_namespace.py runs the same code path on the CPU
through the NumPy stand-in). What to expect where it differs, and why:
- the ring, the casts (bf16 through uint16 bits, fp16 native), stochastic rounding: every bit equal for finite
  inputs; a NaN may come out as CUDA's canonical NaN (0x7FFF...) where x86 keeps a payload;
- the optimizers' fp32 arithmetic: CuPy compiles elementwise kernels without fast math, so each +, -, *, /
  and sqrt rounds correctly, as NumPy's: every bit equal;
- the models' matmuls: cuBLAS sums in another order than OpenBLAS, so the engine on the GPU is compared with
  the engine on the GPU (each stage against stage 0, the unsharded arithmetic), not with the CPU; the distance
  to the CPU run is printed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim import MLP, Cluster, ZeroEngine, get_optimizer
from zerosim.backends.cupy_probe import BackendUnavailable, import_cupy
from zerosim.collectives import all_gather, all_reduce, reduce_scatter
from zerosim.optim import SGD, Adam, AdamW, Lion
from zerosim.precision import cast, get_format
from zerosim.precision.namespace import device_namespace

try:
    cp, _nccl, DEVICES = import_cupy()
except BackendUnavailable as e:
    pytest.skip(f"GPU tests need CuPy and a CUDA device: {e}", allow_module_level=True)

NS = device_namespace(cp, "cupy")
ALL16 = np.arange(2**16, dtype=np.uint16)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(f"uint{8 * a.dtype.itemsize}")


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


def _engine(stage, precision, backend, n=4, steps=3):
    model = MLP([64, 256, 128, 32])
    data = [[(np.random.default_rng(s * n + r).standard_normal((16, 64)).astype(np.float32),
              np.random.default_rng(1000 + s * n + r).standard_normal((16, 32)).astype(np.float32))
             for r in range(n)] for s in range(steps)]
    kw = {"backend": "cupy-sim"} if backend == "gpu" else {}
    engine = ZeroEngine(model, Cluster(n, **kw), stage, get_optimizer("adam", lr=1e-3), precision,
                        params=model.init_params(np.random.default_rng(7)))
    losses = [engine.step([(cp.asarray(x), cp.asarray(t)) if backend == "gpu" else (x, t) for x, t in b])
              for b in data]
    master = np.concatenate([engine.cluster.backend.to_numpy(m) for m in engine.master_shards()])
    return losses, engine.layout.unarrange(master) if stage else master


@pytest.mark.parametrize("precision", ["fp32", "fp16-mixed"])
def test_every_stage_on_the_gpu_equals_stage_0_on_the_gpu(precision):
    losses0, master0 = _engine(0, precision, "gpu")
    for stage in (1, 2, 3):
        losses, master = _engine(stage, precision, "gpu")
        assert losses == losses0 and np.array_equal(bits(master), bits(master0)), f"stage {stage}"
    cpu_losses, cpu_master = _engine(0, precision, "cpu")
    print(f"{precision}: GPU vs CPU, largest master difference {np.abs(master0 - cpu_master).max():.3g}, "
          f"losses {losses0[-1]} vs {cpu_losses[-1]} (cuBLAS sums in another order than OpenBLAS)")
