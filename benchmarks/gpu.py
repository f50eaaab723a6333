"""Speed on one GPU (issue 27, item 3): simulated ranks on the device against yardsticks doing the same work.

    1. a ZeRO-3 step of a ~100M-parameter GPT on 8 simulated ranks on one GPU (backend "cupy-sim", fp16-mixed)
       ÷ the same step on the CPU (the numpy backend), and ÷ 8 forward/backward passes and one Adam step of the
       same model on the GPU with no ranks at all (the oracle's arithmetic: zerosim.models._run.loss_and_grad)
    2. the ring reduce-scatter of 2**24 fp16 elements per rank, N = 8, on the device ÷ a CuPy yardstick doing
       the same adds in the same order (chunk c = ((x[c+1] + x[c+2]) + ...) + x[c], `cupy.add` into a
       preallocated output), the same bits checked

Each pair in turns, median of --repeats after a warm-up, every GPU timing closed by a device synchronise.
Without CuPy and a GPU it says so and exits 0. `--standin` runs the same code at a toy size with NumPy
standing in for CuPy (the cupy-sim backend's `xp="numpy-standin"`), so the suite keeps this script working
(tests/test_benchmarks_run.py); its timings mean nothing.

    python benchmarks/gpu.py [--repeats 5] [--skip-cpu] [--standin]
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

GPT_SHAPE = dict(vocab=8192, d_model=768, n_heads=12, n_layers=12, seq_len=128)  # ~92M params (GPT-2 small's body)
TOY_SHAPE = dict(vocab=64, d_model=16, n_heads=2, n_layers=2, seq_len=8)  # --standin
N, BATCH = 8, 4  # ranks, sequences per rank
RING_COUNT, TOY_RING_COUNT = 2**24, 2**10  # elements per rank
DEVICE = {}  # the cupy-sim backend's arguments: {} on a GPU, {"xp": "numpy-standin"} with --standin


def timed(fn, sync) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def in_turns(runs: dict, repeats: int, sync) -> dict:
    for fn in runs.values():  # warm up
        fn()
    times = {k: [] for k in runs}
    for _ in range(repeats):
        for k, fn in runs.items():
            times[k].append(timed(fn, sync))
    return {k: statistics.median(v) for k, v in times.items()}


def gpt_step(cp, repeats, skip_cpu, shape, sync):
    from zerosim import Adam, Cluster, ZeroEngine
    from zerosim.models import GPT, loss_and_grad, make_sequence_task

    g = shape
    model = GPT(g["vocab"], g["d_model"], g["n_heads"], g["n_layers"], g["seq_len"])
    params = model.init_params(np.random.default_rng(0))
    data = make_sequence_task(np.random.default_rng(1), N, BATCH, g["seq_len"] // 2, g["vocab"])
    dev = [(cp.asarray(x), cp.asarray(t)) for x, t in data]
    engine = ZeroEngine(model, Cluster(N, backend="cupy-sim", trace="call", timeline=False, **DEVICE), 3, Adam(lr=1e-4),
                        "fp16-mixed", params=params)
    w = cp.asarray(params)
    m, v = cp.zeros_like(w), cp.zeros_like(w)
    opt = Adam(lr=1e-4)

    def oracle():  # N passes and one optimizer step over the whole model, on the device, no ranks
        grads = [loss_and_grad(model, w, x, t, "fp16")[1] for x, t in dev]
        total = grads[0].astype(cp.float32)
        for gr in grads[1:]:
            total += gr
        opt.step(w, total / N, {"m": m, "v": v}, 1)

    runs = {"zerosim on the GPU": lambda: engine.step(dev), "oracle on the GPU": oracle}
    if not skip_cpu:
        cpu = ZeroEngine(model, Cluster(N, trace="call", timeline=False, workers="auto"), 3, Adam(lr=1e-4),
                         "fp16-mixed", params=params)
        runs["zerosim on the CPU"] = lambda: cpu.step(data)
    return model.num_params, in_turns(runs, repeats, sync)


def ring(cp, repeats, count, sync):
    from zerosim import Cluster
    from zerosim.collectives import reduce_scatter

    rng = cp.random.default_rng(0)
    xs = [cp.asarray(rng.standard_normal(count, dtype=cp.float32).astype(cp.float16)) for _ in range(N)]
    cluster = Cluster(N, backend="cupy-sim", trace="call", timeline=False, **DEVICE)
    s = count // N
    out = [cp.empty(s, cp.float16) for _ in range(N)]

    def yardstick():  # chunk c = ((x[c+1] + x[c+2]) + ...) + x[c], each add rounded to fp16
        for c in range(N):
            a = slice(c * s, (c + 1) * s)
            cp.add(xs[(c + 1) % N][a], xs[(c + 2) % N][a], out=out[c])
            for k in range(3, N + 1):
                cp.add(out[c], xs[(c + k) % N][a], out=out[c])

    got = reduce_scatter(cluster, xs)
    yardstick()
    assert all(bool((g.view(cp.uint16) == o.view(cp.uint16)).all()) for g, o in zip(got, out)), "not the same bits"
    return in_turns({"ring": lambda: reduce_scatter(cluster, xs), "cupy yardstick": yardstick}, repeats, sync)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--skip-cpu", action="store_true", help="leave out the CPU step (minutes at this size)")
    p.add_argument("--standin", action="store_true", help="NumPy in CuPy's place at a toy size (checks the script)")
    args = p.parse_args()
    if args.standin:
        from zerosim.precision.cast import numpy_standin

        cp, shape, count, sync = numpy_standin().xp, TOY_SHAPE, TOY_RING_COUNT, (lambda: None)
        DEVICE["xp"] = "numpy-standin"
        print("NumPy standing in for CuPy at a toy size: these timings measure nothing")
    else:
        try:
            import cupy as cp

            name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
        except Exception as e:  # no CuPy, or no device
            print(f"benchmarks/gpu.py needs CuPy and an NVIDIA GPU; nothing was measured ({type(e).__name__}: {e})")
            return 0
        shape, count, sync = GPT_SHAPE, RING_COUNT, cp.cuda.Device().synchronize
        print(f"{name}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}, CuPy {cp.__version__}; median of "
              f"{args.repeats} in turns")
    rs = ring(cp, args.repeats, count, sync)
    print(f"ring reduce-scatter, 2**{count.bit_length() - 1} fp16 per rank, N = {N}: {rs['ring'] * 1e3:.1f} ms ÷ "
          f"CuPy yardstick {rs['cupy yardstick'] * 1e3:.1f} ms = {rs['ring'] / rs['cupy yardstick']:.2f}")
    params, t = gpt_step(cp, args.repeats, args.skip_cpu, shape, sync)
    z = t["zerosim on the GPU"]
    print(f"ZeRO-3 step, GPT of {params:,} params, N = {N}, fp16-mixed: {z * 1e3:.0f} ms on the GPU; ÷ the oracle "
          f"on the GPU {t['oracle on the GPU'] * 1e3:.0f} ms = {z / t['oracle on the GPU']:.2f}")
    if "zerosim on the CPU" in t:
        c = t["zerosim on the CPU"]
        print(f"  ÷ the same step on the CPU {c * 1e3:.0f} ms = {z / c:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
