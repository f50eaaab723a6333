"""The CuPy + NCCL backend against the numpy simulator, bit for bit. Needs GPUs; see docs/nccl_mapping.md.

With arrays="host" the ring adds in numpy exactly as the simulator does and NCCL carries every message
(ncclSend/ncclRecv), so any difference here is a transport bug: a lost byte, a wrong count, a bf16
pattern mangled on the way. NCCL's own collectives (`native_*`) add in NCCL's order, which is equal bit
for bit where the order cannot matter (N = 2, max, copies, exactly representable sums) and within a
rounding bound otherwise.

Letters: N ranks (one GPU each), L elements per rank.
"""

import ml_dtypes
import numpy as np
import pytest
from helpers import bits  # the tests' shared helpers (tests/helpers.py)

from zerosim import Cluster, all_gather, all_reduce, broadcast, reduce_scatter
from zerosim.backends.cupy import BackendUnavailable, CupyBackend, import_cupy
from zerosim.backends.mpi import launched_by_mpiexec
from zerosim.collectives import ShardLayout
from zerosim.precision import cast, get_format

try:
    cp, _nccl, DEVICES = import_cupy()
except BackendUnavailable as e:
    pytest.skip(f"GPU tests need CuPy, a CUDA device and NCCL: {e}", allow_module_level=True)

UNDER_MPI = launched_by_mpiexec()
SIZES = [n for n in (1, 2, 3, 4) if n <= DEVICES]  # world sizes one process can drive here (one GPU per rank)
FORMATS = ["fp32", "fp16", "bf16"]
LENGTHS = [0, 1, 5, 64, 1001]  # empty, shorter than N, uneven, a multiple of 1..4, uneven and long
one_process = pytest.mark.skipif(UNDER_MPI, reason="one-process tests; under mpiexec only test_under_mpiexec runs")
two_gpus = pytest.mark.skipif(DEVICES < 2, reason=f"needs 2 GPUs, found {DEVICES}")

_BACKENDS = {}  # (N, arrays) -> CupyBackend: NCCL communicators are slow to create, so tests share them


def gpu_cluster(n: int, arrays: str = "host") -> Cluster:
    if (n, arrays) not in _BACKENDS:
        _BACKENDS[(n, arrays)] = CupyBackend(n, launch="single", arrays=arrays)
    return Cluster(n, backend=_BACKENDS[(n, arrays)])


def inputs(n: int, length: int, fmt: str, seed: int = 0, integers: bool = False) -> list:
    """One (L,) array per rank in `fmt`: normal values, or small integers whose sums are exact in any order."""
    rng = np.random.default_rng([seed, n, length])
    draw = (
        (lambda: rng.integers(-8, 9, length).astype(np.float64))
        if integers
        else (lambda: rng.standard_normal(length) * 3)
    )
    return [cast(draw(), fmt) for _ in range(n)]


def assert_bitwise(got: list, want: list) -> None:
    assert len(got) == len(want)
    for r, (g, w) in enumerate(zip(got, want)):
        assert isinstance(g, np.ndarray), f"rank {r}: got {type(g).__name__}, not a numpy array"
        assert (g.dtype, g.shape) == (w.dtype, w.shape), f"rank {r}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
        np.testing.assert_array_equal(bits(g), bits(w), err_msg=f"rank {r}")


COLLECTIVES = {"reduce_scatter": reduce_scatter, "all_gather": all_gather, "all_reduce": all_reduce,
               "broadcast": broadcast}  # the collectives are functions over a cluster since the redesign


def run_both(n: int, collective: str, *args, **kwargs):
    """Run one collective on the simulator and over NCCL; their results and their traces must be equal."""
    sim, gpu = Cluster(n), gpu_cluster(n)
    want = COLLECTIVES[collective](sim, *args, **kwargs)
    got = COLLECTIVES[collective](gpu, *args, **kwargs)
    assert_bitwise(got, want)
    assert gpu.trace.log == sim.trace.log  # the same hops: NCCL carried what the ring sent, step by step
    return got


# -- the ring over NCCL point-to-point equals the simulator ---------------------------------------
@one_process
@pytest.mark.parametrize("op", ["sum", "avg", "avg_premul", "max"])
@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n", SIZES)
def test_reduce_scatter(n, fmt, length, op):
    run_both(n, "reduce_scatter", inputs(n, length, fmt), op=op)


@one_process
@pytest.mark.parametrize("n", SIZES)
def test_reduce_scatter_bf16_inputs_on_an_fp32_wire(n):
    run_both(n, "reduce_scatter", inputs(n, 1001, "bf16"), wire="fp32")


@one_process
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n", SIZES)
def test_reduce_scatter_and_all_gather_with_uneven_counts(n, fmt):
    counts = [7, 0, 12, 1][:n]  # one layer's window of a sharded buffer: uneven, one rank empty
    xs = inputs(n, sum(counts), fmt)
    shards = run_both(n, "reduce_scatter", xs, counts=counts)
    run_both(n, "all_gather", shards, counts=counts)


@one_process
@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n", SIZES)
def test_all_gather_of_reduce_scatter_shards(n, fmt, length):
    shards = reduce_scatter(Cluster(n), inputs(n, length, fmt))  # ceil(L/N) each, the last ones shorter
    run_both(n, "all_gather", shards)


@one_process
@pytest.mark.parametrize("op", ["sum", "avg"])
@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n", SIZES)
def test_all_reduce(n, fmt, length, op):
    run_both(n, "all_reduce", inputs(n, length, fmt), op=op)


@one_process
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n", SIZES)
def test_broadcast_from_every_root(n, fmt):
    xs = [x.reshape(7, 11) for x in inputs(n, 77, fmt)]
    for root in range(n):
        run_both(n, "broadcast", xs, root=root)


# -- the protocol with arrays on the GPUs -------------------------------------------------------
@one_process
@pytest.mark.parametrize("fmt", FORMATS + ["fp8_e4m3"])
@pytest.mark.parametrize("n", SIZES)
def test_exchange_of_device_arrays_is_a_ring_shift(n, fmt):
    backend = gpu_cluster(n, arrays="device").backend
    host = inputs(n, 1001, fmt, seed=1)
    sends = []
    for r in range(n):
        with cp.cuda.Device(backend.devices[r]):
            sends.append(cp.asarray(bits(host[r])))  # bf16 as uint16, fp8 as uint8: CuPy has neither
    received = backend.exchange(sends, [(r + 1) % n for r in range(n)], [(r - 1) % n for r in range(n)])
    for r in range(n):
        assert received[r].device.id == backend.devices[r]
        got = backend.to_numpy(received[r], dtype=get_format(fmt).dtype)
        np.testing.assert_array_equal(bits(got), bits(host[(r - 1) % n]))


@one_process
@pytest.mark.parametrize("n", SIZES)
def test_device_allocation_per_rank(n):
    backend = gpu_cluster(n, arrays="device").backend
    for r in range(n):
        a = backend.allocator(r)((3, 5), ml_dtypes.bfloat16)
        assert isinstance(a, cp.ndarray) and a.device.id == backend.devices[r]
        assert a.dtype == np.uint16 and a.nbytes == 30  # bf16 lives on the device as its 2-byte pattern


# -- NCCL's own collectives -------------------------------------------------------------------------
def padded(xs: list, n: int) -> list:
    return [ShardLayout(x.shape[0], n).pad(x) for x in xs]


@one_process
@two_gpus
@pytest.mark.parametrize("op", ["sum", "avg_premul"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_native_on_two_ranks_equals_the_ring(fmt, op):
    """With N = 2 every element is one addition (a + b == b + a), so NCCL's order cannot matter."""
    xs = inputs(2, 1001, fmt)
    backend = gpu_cluster(2).backend
    want = reduce_scatter(Cluster(2), xs, op=op)
    got = backend.native_reduce_scatter(padded(xs, 2), op=op)
    assert_bitwise([g[: w.shape[0]] for g, w in zip(got, want)], want)
    assert_bitwise(backend.native_all_reduce(xs, op="sum"), all_reduce(Cluster(2), xs, op="sum"))


@one_process
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n", SIZES)
def test_native_exact_sums_and_max_equal_the_ring(n, fmt):
    """Small integers add exactly in every order, and max is exact in every order: bit for bit at any N."""
    backend = gpu_cluster(n).backend
    ints = inputs(n, 1001, fmt, integers=True)
    want = reduce_scatter(Cluster(n), ints)
    got = backend.native_reduce_scatter(padded(ints, n))
    assert_bitwise([g[: w.shape[0]] for g, w in zip(got, want)], want)
    assert_bitwise(backend.native_all_reduce(ints), all_reduce(Cluster(n), ints))
    xs = inputs(n, 1001, fmt)
    assert_bitwise(backend.native_all_reduce(xs, op="max"), all_reduce(Cluster(n), xs, op="max"))


@one_process
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n", SIZES)
def test_native_sum_within_the_rounding_bound(n, fmt):
    """In any order, a sum of N numbers rounded at each step is within gamma_(N-1) * sum|x| of the exact sum."""
    xs = inputs(n, 4096, fmt)
    u = get_format(fmt).unit_roundoff
    gamma = (n - 1) * u / (1 - (n - 1) * u)  # Higham, Accuracy and Stability, (4.4): any summation order
    exact = np.sum([x.astype(np.float64) for x in xs], axis=0)
    bound = gamma * np.sum([np.abs(x.astype(np.float64)) for x in xs], axis=0)
    for got in gpu_cluster(n).backend.native_all_reduce(xs):
        assert np.all(np.abs(got.astype(np.float64) - exact) <= bound)


@one_process
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n", SIZES)
def test_native_all_gather_and_broadcast_are_copies(n, fmt):
    backend = gpu_cluster(n).backend
    shards = inputs(n, 250, fmt)
    assert_bitwise(backend.native_all_gather(shards), [np.concatenate(shards)] * n)
    for root in range(n):
        assert_bitwise(backend.native_broadcast(shards, root=root), [shards[root]] * n)


# -- one process per GPU under mpiexec -------------------------------------------------------------
@pytest.mark.skipif(not UNDER_MPI, reason="run under mpiexec: mpiexec -n 2 python -m pytest tests/gpu -k mpiexec")
@pytest.mark.parametrize("fmt", FORMATS)
def test_under_mpiexec(fmt):
    """Each process hosts one rank; every process builds all N inputs from one seed, so it can run the
    simulator for the whole world and check its own rank's results bit for bit."""
    from mpi4py import MPI

    n = MPI.COMM_WORLD.size
    gpu = Cluster(n, backend="cupy", launch="mpi")
    me = gpu.ranks[0].index
    sim = Cluster(n)
    for length in LENGTHS:
        xs = inputs(n, length, fmt)
        assert_bitwise(reduce_scatter(gpu, [xs[me]]), reduce_scatter(sim, xs)[me : me + 1])
        assert_bitwise(all_reduce(gpu, [xs[me]], op="avg"), all_reduce(sim, xs, op="avg")[me : me + 1])
        shards = reduce_scatter(sim, xs)
        assert_bitwise(all_gather(gpu, [shards[me]]), all_gather(sim, shards)[me : me + 1])
        assert_bitwise(broadcast(gpu, [xs[me]], root=n - 1), broadcast(sim, xs, root=n - 1)[me : me + 1])
