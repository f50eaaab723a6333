"""What zerosim's portable arithmetic buys and costs (zerosim/precision/arithmetic/).

1. Buys: the same bits under every kernel. 300 random fp32 products (shapes up to 200 × 200 × 200) and NumPy's
   float32 exp, log, tanh, sin, cos and x**3 on 10**6 arguments, each computed in a fresh process under OpenBLAS's
   AVX2 (Haswell), AVX-512 (SkylakeX, where the CPU has it) and generic (Prescott) kernels and with NumPy's SIMD
   dispatch narrowed to its baseline; the share of elements whose bits differ from the Haswell process's, for the
   machine's own kernels ("native") and for zerosim's portable ones.
2. Costs: CPU seconds per training step (this process's, one worker: the work done, whatever else the machine
   runs), native and portable, for small teaching models and the 919k and 10M MLPs of benchmarks/peers.py, median
   of --repeats steps after a warm-up.

    python benchmarks/portable_numbers.py [--repeats 5] [--skip-kernels] [--skip-cost]

Prints the machine (benchmarks/machine.py) and the load average; the numbers are this machine's.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/machine.py, however this file is run
from machine import cpu_flags, describe  # noqa: E402

FUNCTIONS = ("exp", "log", "tanh", "sin", "cos")


def outputs(path: str) -> None:
    """Write every product's and function's bits, native and portable, to `path` (run in a fresh process)."""
    from zerosim.precision import arithmetic as correctly_rounded
    from zerosim.precision.arithmetic import exact_matmul

    rng = np.random.default_rng(1)
    native, portable = [], []
    for _ in range(300):
        m, k, n = rng.integers(1, 200, 3)
        a = (rng.standard_normal((m, k)) * 2.0 ** rng.integers(-10, 10)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        native.append((a @ b).ravel())
        portable.append(exact_matmul(a, b).ravel())
    x = (rng.standard_normal(10**6) * 4).astype(np.float32)
    args = {"log": np.abs(x) + np.float32(1e-3)}
    for name in FUNCTIONS:
        native.append(getattr(np, name)(args.get(name, x)))
        portable.append(getattr(correctly_rounded, name)(args.get(name, x)))
    native.append(x**3)
    portable.append(x * x * x)  # what the portable GELU computes instead of NumPy's SIMD power
    np.savez(path, native=np.concatenate([a.view(np.uint32) for a in native[:300]]),
             portable=np.concatenate([a.view(np.uint32) for a in portable[:300]]),
             **{f"native {name}": a.view(np.uint32) for name, a in zip((*FUNCTIONS, "x**3"), native[300:])},
             **{f"portable {name}": a.view(np.uint32) for name, a in zip((*FUNCTIONS, "x**3"), portable[300:])})


def narrowed_simd() -> str | None:
    """NumPy's run-time SIMD targets above its baseline, for NPY_DISABLE_CPU_FEATURES (None: nothing to narrow)."""
    from numpy._core import _multiarray_umath as umath
    on = [t for t in umath.__cpu_dispatch__ if umath.__cpu_features__.get(t)]
    return " ".join(on) or None


def kernels_table() -> None:
    lanes = {"Haswell (AVX2)": {"OPENBLAS_CORETYPE": "Haswell"}}
    if "avx512f" in cpu_flags():
        lanes["SkylakeX (AVX-512)"] = {"OPENBLAS_CORETYPE": "SkylakeX"}
    lanes["Prescott (generic)"] = {"OPENBLAS_CORETYPE": "Prescott"}
    if narrowed_simd():
        lanes["NumPy SIMD at its baseline"] = {"NPY_DISABLE_CPU_FEATURES": narrowed_simd()}
    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        for lane, env in lanes.items():
            path = os.path.join(tmp, f"{len(got)}.npz")
            subprocess.run([sys.executable, __file__, "--outputs", path], check=True, env={**os.environ, **env})
            got[lane] = dict(np.load(path))
    base = got.pop("Haswell (AVX2)")
    print("\nshare of elements whose bits differ from the Haswell kernels' "
          "(native: the machine's; portable: zerosim's)")
    keys = ["native", "portable"] + [f"{kind} {f}" for f in (*FUNCTIONS, "x**3") for kind in ("native", "portable")]
    print(f"{'lane':<28}" + "".join(f"{k.replace('native', 'nat').replace('portable', 'port'):>13}" for k in keys))
    for lane, arrays in got.items():
        print(f"{lane:<28}" + "".join(f"{np.mean(arrays[k] != base[k]):>13.2%}" for k in keys))


def step_seconds(make, repeats: int) -> float:
    """Median CPU seconds of one step (process time: a busy machine's other work is not counted)."""
    step = make()
    step()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        step()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def mlp(widths, arithmetic: str):
    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.precision import get_precision

    def make():
        model = MLP(widths)
        engine = ZeroEngine(model, Cluster(2, trace="call", timeline=False), 1, Adam(lr=1e-3),
                            get_precision("fp32").with_(arithmetic=arithmetic), params=model.init_params())
        rng = np.random.default_rng(0)
        data = [(rng.standard_normal((32, widths[0])).astype(np.float32),
                 rng.standard_normal((32, widths[-1])).astype(np.float32)) for _ in range(2)]
        return lambda: engine.step(data)

    return make


def decoder(kind: str, arithmetic: str):
    from zerosim import Adam, Cluster, ZeroEngine
    from zerosim.models import GPT, Llama, make_sequence_task
    from zerosim.precision import get_precision

    def make():
        model = GPT(6, 16, 2, 1, 6) if kind == "gpt" else Llama(6, 16, 4, 1, 6, n_kv_heads=2)
        engine = ZeroEngine(model, Cluster(2, trace="call", timeline=False), 2, Adam(lr=1e-2),
                            get_precision("fp16-mixed").with_(arithmetic=arithmetic),
                            params=model.init_params(np.random.default_rng(1)))
        data = make_sequence_task(np.random.default_rng(0), 2, 16, 3, 6, "copy")
        return lambda: engine.step(data)

    return make


def cost_table(repeats: int) -> None:
    cases = {
        "MLP 16-64-64-4, fp32, batch 32": lambda a: mlp([16, 64, 64, 4], a),
        "GPT copy task (3,600 params), fp16-mixed": lambda a: decoder("gpt", a),
        "Llama copy task, fp16-mixed": lambda a: decoder("llama", a),
        "MLP 919k, fp32, batch 32": lambda a: mlp([256, 1024, 512, 256], a),
        "MLP 10M, fp32, batch 32": lambda a: mlp([1024, 2048, 2560, 1024], a),
    }
    print(f"\nCPU ms per step on 2 ranks, one worker, median of {repeats} (load average {load()} at the start)")
    print(f"{'case':<44} {'native ms':>10} {'portable ms':>12} {'portable ÷ native':>18}")
    for name, case in cases.items():
        native, portable = (step_seconds(case(a), repeats) for a in ("native", "portable"))
        print(f"{name:<44} {native * 1e3:>10.2f} {portable * 1e3:>12.2f} {portable / native:>18.2f}")
    print(f"load average at the end {load()}")


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--skip-kernels", action="store_true")
    p.add_argument("--skip-cost", action="store_true")
    p.add_argument("--outputs", help=argparse.SUPPRESS)  # the per-kernel child process
    args = p.parse_args()
    if args.outputs:
        outputs(args.outputs)
        return 0
    print(f"{describe()}; load average {load()}")
    if not args.skip_kernels:
        kernels_table()
    if not args.skip_cost:
        cost_table(args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
