"""The simulated ring ÷ the same additions done as fast as NumPy can, over N ranks and buffer sizes.

Yardstick: the reduce-scatter's arithmetic itself, chunk by chunk in NCCL's ring order — for each chunk c,
((x[c+1] + x[c+2]) + ...) + x[c] with NumPy adds in the wire dtype into one preallocated buffer. It
gives the ring's bits exactly (the script checks), so the ratio is only what simulating costs: input
checks, staging, the trace, the ledgers. (An `np.add.reduce` over a stacked (N, S) array adds in another
order, and its axis-0 loop over 16-bit types is slow: it would flatter the ring.)

    python benchmarks/collectives.py                  # the table benchmarks/README.md quotes
    python benchmarks/collectives.py --quick          # a smaller sweep
    python benchmarks/collectives.py --windows        # small chunks: one add per ring step ÷ one add per chunk

--windows times the two ways collectives/_fast.py adds up a reduce-scatter on the ZeRO-3 layer windows of
benchmarks/yardstick.py's small case (MLP 32-96-64-16 on 64 ranks, bf16: 69 non-empty chunks of up to 163
elements): `_by_step` (what it now does for small chunks) against `_by_chunk` (its naive twin, what it did), in
turns, the bits checked equal.

Measured in turns (ring, yardstick, yardstick, ring, ...: who goes first alternates), median of --repeats,
BLAS on one thread, one summary trace event per rank and call (`trace="call"`: per-hop events are for teaching
runs). Targets (issue 14):
ratio <= 1.2 at 2**22 elements per rank for N = 2..64, <= 2 at 2**16 per rank for N = 64; the sizes
between (2**18, 2**20) are printed too. Then the same for fp32 with an event per hop (`trace="hop"`,
what `Cluster(N)` keeps by default): the ring runs hop by hop there, a Python step per rank and hop.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

from zerosim import Cluster, reduce_scatter  # noqa: E402

DTYPES = {"fp32": np.dtype(np.float32), "bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16)}


def chunk_order_sum(xs: list, out: list) -> None:
    """The yardstick: chunk c of `out` = ((x[c+1] + x[c+2]) + ...) + x[c], NumPy adds in the inputs' dtype."""
    n, s = len(xs), xs[0].shape[0] // len(xs)
    for c in range(n):
        acc = out[c]
        np.add(xs[(c + 1) % n][c * s : (c + 1) * s], xs[(c + 2) % n][c * s : (c + 1) * s], out=acc)
        for k in range(3, n + 1):
            np.add(acc, xs[(c + k) % n][c * s : (c + 1) * s], out=acc)


def measure(dtype, n: int, elements: int, repeats: int, trace: str = "call") -> tuple:
    rng = np.random.default_rng([n, elements])
    xs = [rng.standard_normal(elements, dtype=np.float32).astype(dtype) for _ in range(n)]  # (S,) per rank
    out = [np.empty(elements // n, dtype) for _ in range(n)]  # the yardstick's results, allocated once
    dest = [np.empty(elements // n, dtype) for _ in range(n)]  # and the ring's: both write into their destination
    cluster = Cluster(n, trace=trace, timeline=False)

    def ring():
        got = reduce_scatter(cluster, xs, out=dest)
        cluster.trace.clear()
        return got

    got = ring()  # untimed: first touch and lazy imports are not the subject; then check the bits
    chunk_order_sum(xs, out)
    assert all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(got, out)), (
        "the yardstick must add as the ring does"
    )
    times = {ring: [], chunk_order_sum: []}
    args = {ring: (), chunk_order_sum: (xs, out)}
    for i in range(repeats):  # in turns, who goes first alternating (the second of a pair finds caches the first left)
        for fn in (ring, chunk_order_sum) if i % 2 == 0 else (chunk_order_sum, ring):
            t0 = time.perf_counter()
            fn(*args[fn])
            times[fn].append(time.perf_counter() - t0)
    return statistics.median(times[ring]), statistics.median(times[chunk_order_sum])


def windows(repeats: int) -> None:
    """The --windows table: `_by_step` ÷ `_by_chunk` on the yardstick's three ZeRO-3 windows (see the docstring)."""
    from zerosim.collectives import _fast as fast
    from zerosim.collectives import get_op
    from zerosim.precision import cast, get_format

    widths, n = [32, 96, 64, 16], 64
    sizes = [i * o + o for i, o in zip(widths[:-1], widths[1:])]  # each Linear's [W, b]: its window
    shard = -(-sum(sizes) // n)
    wire, ns, ring = get_format("bf16"), Cluster(n).backend.xp, tuple(range(n))
    combine, rng = get_op("sum").combiner(wire), np.random.default_rng(0)
    print(f"reduce-scatter of one ZeRO-3 window on {n} ranks, bf16: one add per ring step (_by_step) ÷ one add per "
          f"chunk (_by_chunk), median of {repeats} in turns")
    start = 0
    for size in sizes:
        bounds = [(min(max(start, c * shard), start + size) - start, min(max(start, (c + 1) * shard), start + size)
                   - start) for c in range(n)]  # rank c's piece of the window (empty outside its shard)
        staged = [cast(rng.standard_normal(size), wire) for _ in range(n)]
        got, times = {}, {fast._by_chunk: [], fast._by_step: []}
        for r in range(repeats + 1):  # the first round warms up (the index cache, first touches)
            for how in (fast._by_chunk, fast._by_step)[:: 1 if r % 2 else -1]:
                results = [None] * n
                t0 = time.process_time()
                how(ns, combine, staged, ring, bounds, wire, None, results)
                if r:
                    times[how].append(time.process_time() - t0)
                got[how] = b"".join(x.tobytes() for x in results)
        assert got[fast._by_chunk] == got[fast._by_step], "the two ways gave different bits"
        chunk, step = (statistics.median(times[h]) for h in (fast._by_chunk, fast._by_step))
        chunks = sum(1 for a, b in bounds if b > a)
        print(f"  window of {size:>5,} elements, {chunks:>2} chunks: by chunk {chunk * 1e3:6.2f} ms, by step "
              f"{step * 1e3:6.2f} ms, ratio {step / chunk:.2f}")
        start += size


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per cell; the median counts (default 5)")
    parser.add_argument("--quick", action="store_true", help="N = 2, 8, 64 and one dtype at 2**22 (a few seconds)")
    parser.add_argument("--windows", action="store_true", help="only the small-chunk table (see the docstring)")
    args = parser.parse_args(argv)
    if args.windows:
        windows(args.repeats)
        return 0
    worlds = (2, 8, 64) if args.quick else (2, 4, 8, 16, 32, 64)
    threads = {v: os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    print(f"ring reduce-scatter ÷ the same adds in chunk order (NumPy), median of {args.repeats} in turns; BLAS "
          f"threads {threads}")
    print(f"{'elements/rank':>14} {'dtype':>6} " + " ".join(f"{'N=' + str(n):>7}" for n in worlds) + "   target")
    for log2, target in ((22, 1.2), (20, None), (18, None), (16, 2.0)):
        for name, dtype in DTYPES.items():
            if args.quick and (name != "fp32" or log2 != 22):
                continue
            ratios = [measure(dtype, n, (2**log2 // n) * n, args.repeats) for n in worlds]
            print(
                f"{'2**' + str(log2):>14} {name:>6} "
                + " ".join(f"{t_ring / t_base:7.2f}" for t_ring, t_base in ratios)
                + ("" if target is None else f"   <= {target:g}" + ("" if log2 == 22 else " at N=64"))
            )
    if args.quick:
        return 0
    print('with an event per hop (trace="hop", the default of Cluster(N)): the ring hop by hop ÷ the same yardstick')
    for log2 in (22, 16):
        ratios = [measure(DTYPES["fp32"], n, (2**log2 // n) * n, args.repeats, trace="hop") for n in worlds]
        print(
            f"{'2**' + str(log2):>14} {'fp32':>6} " + " ".join(f"{t_ring / t_base:7.2f}" for t_ring, t_base in ratios)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
