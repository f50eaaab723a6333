"""How fast is zerosim's cast next to a plain astype of the same data?

    python benchmarks/casts.py                      # 2**16 and 2**22 elements, median of 7 turns
    python benchmarks/casts.py --log2-sizes 16 --repeats 5 --reference
    python benchmarks/casts.py --targets fp16 --scales 0 -17     # also values as small as fp16's gradients

Yardsticks, each doing the same work on the same data in the same run:
- round to nearest: `x.astype(target)` (NumPy / ml_dtypes). From float64 ml_dtypes rounds twice
  (through float32) where zerosim rounds once, so astype is a speed yardstick, not a correct answer.
- stochastic rounding: zerosim's own round to nearest of the same data; the uniforms are drawn
  before timing (drawing them is the caller's cost, the same for every implementation).
- with --reference: the naive twin `cast_reference` (zerosim's first implementation), both modes,
  printed as how many times slower than the fast cast it is.

Targets: cast / astype <= 2, stochastic / nearest <= 5. The script always exits 0; it reports, it
does not judge. Data: standard normal float64 times 2**scale (--scales, default 0), and the same numbers rounded to
float32. At 2**-17 most values lie below fp16's smallest normal, as an fp16 run's gradients do: NumPy's astype
raises the underflow flag an element there (precision/cast/_fp16.py), which zerosim's cast into fp16 does not;
stochastic rounding's carry formula holds for normal results only, and the rest take the naive twin, so there
stochastic / nearest reads far past its target (2026-11-26: 17.6 at 2**22 elements; not yet made faster).
"""

from __future__ import annotations

import os

# One thread everywhere, set before NumPy loads its libraries: the timings must not depend on how
# many cores other work leaves free.
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
for _var in THREAD_VARS:
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from zerosim.precision import cast, get_format  # noqa: E402
from zerosim.precision.cast import cast_reference

TARGETS = ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
SOURCES = ("fp64", "fp32")
NEAREST_TARGET = 2.0  # largest acceptable cast / astype
STOCHASTIC_TARGET = 5.0  # largest acceptable stochastic / nearest


def medians_in_turns(repeats: int, fns: dict) -> dict:
    """Median wall-clock seconds of each fn over `repeats` rounds; within a round every fn runs in turn,
    so a busy spell on the machine falls on all of them alike (the order is shuffled, seeded, each
    round). Each timed call follows an untimed call of the same fn: otherwise a fn pays page faults
    for memory that the previous fn's freed buffers made the allocator hand back to the system, and
    at 2**16 elements that costs more than a copy (a 5x spread between two identical astype calls)."""
    names = list(fns)
    times = {name: [] for name in names}
    order = random.Random(0)
    for _ in range(repeats):
        order.shuffle(names)
        for name in names:
            fns[name]()  # settle caches and the allocator on this fn's own pattern
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def measure(x: np.ndarray, target: str, u: np.ndarray, repeats: int, reference: bool) -> dict:
    dtype = get_format(target).dtype
    fns = {
        "astype": lambda: x.astype(dtype),
        "nearest": lambda: cast(x, target),
        "stochastic": lambda: cast(x, target, "stochastic", uniforms=u),
    }
    if reference:
        fns["ref_nearest"] = lambda: cast_reference(x, target)
        fns["ref_stochastic"] = lambda: cast_reference(x, target, "stochastic", uniforms=u)
    return medians_in_turns(repeats, fns)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2-sizes", type=int, nargs="+", default=[16, 22], help="element counts 2**k (default 16 "
                                                                                    "22)")
    parser.add_argument("--repeats", type=int, default=7, help="timed turns; the median counts (default 7, at least 5)")
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--reference", action="store_true", help="also time the naive twin cast_reference (slow)")
    parser.add_argument("--scales", type=int, nargs="+", default=[0], help="data times 2**scale (default 0)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.repeats < 5:
        parser.error("--repeats must be at least 5: a median of fewer turns is one noisy sample")

    print("threads: " + ", ".join(f"{v}={os.environ[v]}" for v in THREAD_VARS) + f"; numpy {np.__version__}")
    print(f"median of {args.repeats} turns; ratios within one run: nearest / astype (target <= {NEAREST_TARGET:g}), "
          f"stochastic / nearest (target <= {STOCHASTIC_TARGET:g})")
    ref_cols = f" {'twin/fast nearest':>17} {'twin/fast sr':>12}" if args.reference else ""
    print(f"{'size':>6} {'scale':>5} {'from':>4} {'to':>8} {'astype ms':>10} {'nearest/astype':>14} "
          f"{'sr/nearest':>10}  ok {ref_cols}")
    rng = np.random.default_rng(args.seed)
    for k, scale in ((k, scale) for k in args.log2_sizes for scale in args.scales):
        x64 = rng.standard_normal(2**k) * 2.0**scale  # (n,) float64
        u = rng.random(2**k)  # (n,) float64 uniforms in [0, 1)
        for source in SOURCES:
            x = x64 if source == "fp64" else x64.astype(np.float32)
            for target in args.targets:
                t = measure(x, target, u, args.repeats, args.reference)
                nearest, stochastic = t["nearest"] / t["astype"], t["stochastic"] / t["nearest"]
                ok = "yes" if nearest <= NEAREST_TARGET and stochastic <= STOCHASTIC_TARGET else "NO"
                line = (f"{'2**' + str(k):>6} {scale:>5} {source:>4} {target:>8} {t['astype'] * 1e3:>10.3f} "
                        f"{nearest:>14.2f} {stochastic:>10.2f} {ok:>3}")
                if args.reference:
                    line += f"  {t['ref_nearest'] / t['nearest']:>17.1f} {t['ref_stochastic'] / t['stochastic']:>12.1f}"
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
