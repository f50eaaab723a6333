"""gloo's ring all-reduce (zerosim/collectives/chunk_maps/_gloo.py): its chunk map, its order, its AVG, against
hand-derived rows, the naive twin, and — where torch is installed — torch 2.13's own ProcessGroupGloo on N processes."""

import numpy as np
import pytest
from helpers import bits
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim import Cluster
from zerosim.collectives import all_reduce, gloo_all_reduce, gloo_reduce_scatter, gloo_ring, naive_reduce
from zerosim.precision import cast, get_format

MIB = 1024 * 1024

GLOO_RING_TABLE = [
    # (count, N, bytes per element, chunks, why) — gloo/allreduce.cc `ring`
    (10, 3, 2, ((0, 4), (4, 8), (8, 10)),
     "20 bytes: numSegments = roundUp(max(1, 2*3), 3) = 6, segmentBytes = ceil(20/6) = 4 -> 2 elements; chunk = 2 "
     "segments = 4 elements (zerosim's shards happen to agree: ceil(10/3) = 4)"),
    (7, 3, 2, ((0, 4), (4, 7), (7, 7)),
     "6 segments of ceil(14/6) = 3 bytes -> rounded up to 4 bytes = 2 elements; chunks of 4: rank 2 owns nothing "
     "(zerosim: 3, 3, 1)"),
    (1, 4, 4, ((0, 1), (1, 1), (1, 1), (1, 1)),
     "8 segments of ceil(4/8) = 1 byte -> 4 bytes = 1 element; chunk 0 = segments 0-1 holds the one element"),
    (300_000, 2, 4, ((0, 150_000), (150_000, 300_000)),
     "1.2 MB: ceil(1_200_000 / 1 MiB) = 2 < 2N = 4 segments of 300_000 bytes = 75_000 elements, 2 per rank"),
    (2_000_000, 3, 4, ((0, 666_669), (666_669, 1_333_338), (1_333_338, 2_000_000)),
     "8 MB: ceil(8_000_000 / 1 MiB) = 8 > 2N = 6, roundUp(8, 3) = 9 segments of ceil(8e6 / 9) = 888_889 bytes -> "
     "888_892 = 222_223 elements; 3 per rank = 666_669 (zerosim's shards: 666_667)"),
]


@pytest.mark.parametrize(
    "count, n, size, chunks, why", GLOO_RING_TABLE, ids=[f"{r[0]}x{r[1]}" for r in GLOO_RING_TABLE]
)
def test_gloo_chunk_map_table(count, n, size, chunks, why):
    assert gloo_ring(count, n, size).chunks == chunks, why


def fp16(values) -> np.ndarray:
    return np.array(values, dtype=np.float16)


# Each row: rank r's buffer, and the element gloo's all-reduce gives, worked out by hand (fp16: spacing 2 at 2048,
# ties to even). gloo's chunk k starts at rank k-1 and walks down: ((x[k-1] + x[k-2]) + ...) + x[k].
VALUE_TABLE = [
    ("order: N = 4, one element per chunk pair",
     [fp16([0, 0] * 4), fp16([2048, 2048] * 4), fp16([1, 1] * 4), fp16([1, 1] * 4)],
     [2050, 2050, 2050, 2050, 2048, 2048, 2048, 2048],
     "8 elements, 8 segments of 1: chunk k = elements 2k, 2k+1. Chunk 0: ((x3 + x2) + x1) + x0 = (2 + 2048) + 0 = "
     "2050. Chunk 1: ((x0 + x3) + x2) + x1 = (1 + 1) + 2048 = 2050. Chunk 2: ((x1 + x0) + x3) + x2 = 2048 + 1 = 2049 "
     "-> 2048 (tie to even), + 1 -> 2048. Chunk 3: ((x2 + x1) + x0) + x3 = 2049 -> 2048, + 0, + 1 -> 2048. (NCCL's "
     "order, ((x[c+1] + x[c+2]) + x[c+3]) + x[c], gives the chunks 2048, 2050, 2048, 2048)"),
    ("chunk map: N = 3, 7 elements",
     [fp16([1] * 7), fp16([2048] * 7), fp16([1] * 7)],
     [2048, 2048, 2048, 2048, 2050, 2050, 2050],
     "gloo's chunks [0, 4), [4, 7), [7, 7). Chunk 0: (x2 + x1) + x0 = 2049 -> 2048, + 1 -> 2048. Chunk 1: "
     "(x0 + x2) + x1 = 2 + 2048 = 2050. zerosim's shards [0, 3), [3, 6), [6, 7) would give element 3 (its chunk 1: "
     "(x2 + x0) + x1) 2050 and element 6 (chunk 2: (x0 + x1) + x2) 2048"),
]


@pytest.mark.parametrize("name, xs, want, why", VALUE_TABLE, ids=[r[0] for r in VALUE_TABLE])
@pytest.mark.parametrize("trace", ["hop", "call"])
def test_gloo_value_table(name, xs, want, why, trace):
    out = gloo_all_reduce(Cluster(len(xs), trace=trace), xs)
    for o in out:
        assert o.tolist() == want, why


def test_the_value_table_tells_gloo_from_zerosims_ring():
    for name, xs, want, why in VALUE_TABLE:
        ring = all_reduce(Cluster(len(xs)), xs)
        assert ring[0].tolist() != want, f"{name}: the ring gives the same bits, so the row shows nothing"


FORMATS = ["fp16", "bf16", "fp32", "fp8_e4m3"]


@settings(max_examples=40)
@given(n=st.integers(1, 6), length=st.integers(0, 70), fmt=st.sampled_from(FORMATS), seed=st.integers(0, 2**16),
       trace=st.sampled_from(["hop", "call"]), segment=st.sampled_from([4, 16, MIB]))
def test_gloo_all_reduce_equals_its_naive_twin(n, length, fmt, seed, trace, segment):
    # the ring, hop by hop through the backend (or its chunk-by-chunk twin), against the naive reduction in gloo's
    # order (naive.py: every add exact in float64 and rounded once), over gloo's chunk map
    rng = np.random.default_rng(seed)
    f = get_format(fmt)
    xs = [cast(rng.standard_normal(length) * 2.0 ** rng.integers(-4, 5, length), f) for _ in range(n)]
    ring = gloo_ring(length, n, f.itemsize, segment)
    want = naive_reduce(xs, wire=f, chunks=[(k, a, b) for k, (a, b) in enumerate(ring.chunks)], direction=-1)
    out = gloo_all_reduce(Cluster(n, trace=trace), xs, max_segment_bytes=segment)
    for o in out:
        assert np.array_equal(bits(o), bits(want))


@settings(max_examples=30)
@given(n=st.integers(1, 5), per=st.integers(0, 12), fmt=st.sampled_from(["fp16", "bf16", "fp32"]),
       seed=st.integers(0, 2**16))
def test_gloo_reduce_scatter_and_avg(n, per, fmt, seed):
    # ProcessGroupGloo's reduce-scatter = its all-reduce of the whole buffer, rank r keeping block r; AVG = the sum,
    # then x / N in the buffer's dtype (CPU division: the fp32 quotient, rounded once more for 16 bits)
    rng = np.random.default_rng(seed)
    f = get_format(fmt)
    xs = [cast(rng.standard_normal(n * per) * 3, f) for _ in range(n)]
    summed = gloo_all_reduce(Cluster(n), xs)[0]
    blocks = gloo_reduce_scatter(Cluster(n), xs)
    for r in range(n):
        assert np.array_equal(bits(blocks[r]), bits(summed[r * per : (r + 1) * per]))
    avg = gloo_all_reduce(Cluster(n), xs, op="avg")[0]
    want = cast((summed.astype(np.float64) / n).astype(np.float32), f) if f.bits < 32 else \
        (summed / np.float32(n)).astype(f.dtype)
    assert np.array_equal(bits(avg), bits(want))


def test_gloo_records_its_chunk_map_and_an_all_reduces_bytes():
    cluster = Cluster(3, trace="call")
    gloo_all_reduce(cluster, [np.ones(7, np.float16)] * 3, tag="bucket")
    calls = cluster.trace.calls
    assert [c.collective for c in calls] == ["gloo_all_reduce"] * 2  # reduce-scatter phase, all-gather phase
    assert all(c.chunk_map == ((0, 4), (4, 7), (7, 7)) for c in calls)
    # reduce-scatter: rank r sends every chunk but its own (sizes 4, 3, 0); all-gather: chunks r, ..., r+N-2, every
    # chunk but r-1's
    assert [cluster.trace.bytes_sent(r, call=0) for r in range(3)] == [2 * 3, 2 * 4, 2 * 7]
    assert [cluster.trace.bytes_sent(r, call=1) for r in range(3)] == [2 * 7, 2 * 3, 2 * 4]


@pytest.mark.bad_input("collectives", unchanged=True)
@pytest.mark.parametrize("kwargs, message", [
    (dict(), "7 elements do not split into 3 equal blocks; pass counts"),
    (dict(counts=[3, 3, 3]), r"counts \[3, 3, 3\] add up to 9, but the buffers hold 7 elements"),
    (dict(counts=[3, 4]), "counts must be 3 non-negative integers"),
])
def test_gloo_reduce_scatter_refuses_blocks_that_do_not_fit(kwargs, message):
    cluster = Cluster(3)
    xs = [np.ones(7, np.float32) for _ in range(3)]
    with pytest.raises(ValueError, match=message):
        gloo_reduce_scatter(cluster, xs, **kwargs)
    assert not cluster.trace.calls and all(not r.ledger.live for r in cluster.ranks)
    assert all(np.array_equal(x, np.ones(7, np.float32)) for x in xs)


# -- against torch's own gloo (the parity extra) ------------------------------------------------------------------
TORCH_LENGTHS = [1, 2, 3, 5, 7, 10, 13, 31, 100, 257, 300_000]


def _torch_cases(n: int, fmt: str, lengths, seed: int) -> list:
    rng = np.random.default_rng(seed)
    f = get_format(fmt)
    return [[cast(rng.standard_normal(L) * 2.0 ** rng.integers(-6, 7, L), f) for _ in range(n)] for L in lengths]


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_gloo_all_reduce_is_torchs_bit_for_bit(n):
    pytest.importorskip("torch", reason="torch (the parity extra) is not installed: pip install -e '.[parity]'")
    from zerosim.frameworks.torch import torch_gloo_calls

    cases = [c for fmt in ("fp16", "bf16", "fp32") for c in _torch_cases(n, fmt, TORCH_LENGTHS, n)]
    blocks = [c for c in cases if len(c[0]) % n == 0]
    got = torch_gloo_calls([("all_reduce", "sum", c) for c in cases] + [("all_reduce", "avg", c) for c in cases]
                           + [("reduce_scatter", "avg", c) for c in blocks])  # one set of N torch processes
    got_sum, got_avg, got_rs = got[: len(cases)], got[len(cases) : 2 * len(cases)], got[2 * len(cases) :]
    differs_from_ring = 0
    for xs, t_sum, t_avg in zip(cases, got_sum, got_avg):
        mine = gloo_all_reduce(Cluster(n, trace="call"), xs)
        assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(mine, t_sum)), (xs[0].dtype, len(xs[0]))
        mine = gloo_all_reduce(Cluster(n, trace="call"), xs, op="avg")
        assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(mine, t_avg)), (xs[0].dtype, len(xs[0]))
        ring = all_reduce(Cluster(n, trace="call"), xs)[0]
        differs_from_ring += not np.array_equal(bits(ring), bits(t_sum[0]))
    for xs, t_rs in zip(blocks, got_rs):
        mine = gloo_reduce_scatter(Cluster(n, trace="call"), xs, op="avg")
        assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(mine, t_rs))
    if n >= 3:  # the comparison can fail: zerosim's own ring (NCCL's order, equal shards) disagrees with torch here
        assert differs_from_ring > 0


def test_ncclavg_in_bf16_biases_the_mean_and_gloos_avg_does_not():
    # NCCL's ncclAvg pre-multiplies by the scalar 1/N rounded to the wire dtype (ops.py "avg_premul"): bf16(1/3) =
    # 0.333984375 = (1/3)(1 + 2**-9), so every mean comes out 1.00195 times too large on average (+0.195 %), on top
    # of round-to-nearest's unbiased noise. gloo's AVG sums, then divides by 3 correctly rounded: no bias. Over
    # 20,000 elements of 3 ranks the noise of the mean ratio is ~2**-9 / sqrt(20,000) ~ 1.4e-5, far inside 2e-4.
    rng = np.random.default_rng(0)
    bf16 = get_format("bf16")
    xs = [cast(rng.uniform(1, 2, 20_000), bf16) for _ in range(3)]
    exact = sum(x.astype(np.float64) for x in xs) / 3
    nccl = all_reduce(Cluster(3, trace="call"), xs, op="avg_premul")[0].astype(np.float64)
    gloo = gloo_all_reduce(Cluster(3, trace="call"), xs, op="avg")[0].astype(np.float64)
    assert abs(np.mean(nccl / exact) - (1 + 2.0**-9)) < 2e-4  # +0.195 %
    assert abs(np.mean(gloo / exact) - 1) < 2e-4
