"""Collectives over groups on the CuPy + NCCL backend, against the numpy simulator. Needs GPUs (skipped without).

NOTE: written against cupy.cuda.nccl's API and never run where it was written (no GPU was at hand);
docs/how-to/run-on-gpus.md says so. What it checks when it runs: the ring over a `Groups` carries every message through
NCCL (ncclSend / ncclRecv on the world communicator) and gives the simulator's bits; NCCL's own collectives over each
group's communicator (`group_comms`: NcclCommunicator.initAll of the group's GPUs) give them where the order of
additions cannot matter (groups of 2: one addition per element; all-gather and broadcast copy).

Letters: N ranks (one GPU each), n ranks per group.
"""

import numpy as np
import pytest
from helpers import bits  # the tests' shared helpers (tests/helpers.py)

from zerosim import Cluster, Groups, all_gather, all_reduce, broadcast, reduce_scatter
from zerosim.backends.cupy import BackendUnavailable, CupyBackend, import_cupy
from zerosim.backends.mpi import launched_by_mpiexec
from zerosim.precision import cast

try:
    cp, _nccl, DEVICES = import_cupy()
except BackendUnavailable as e:
    pytest.skip(f"GPU tests need CuPy, a CUDA device and NCCL: {e}", allow_module_level=True)

pytestmark = [
    pytest.mark.skipif(DEVICES < 4, reason=f"a 2 × 2 mesh needs 4 GPUs, found {DEVICES}"),
    pytest.mark.skipif(launched_by_mpiexec(), reason="one process drives the four GPUs here"),
]
GROUPS = {"shard": Groups.blocks(4, 2), "replicate": Groups.strided(4, 2)}


def inputs(n: int, length: int, fmt: str) -> list:
    rng = np.random.default_rng([n, length])
    return [cast(rng.standard_normal(length) * 3, fmt) for _ in range(n)]


@pytest.fixture(scope="module")
def backend():
    return CupyBackend(4, launch="single", arrays="host")


@pytest.mark.parametrize("name", list(GROUPS))
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("length", [0, 3, 64, 1001])
def test_ring_over_groups_equals_the_simulator(backend, name, fmt, length):
    group, xs = GROUPS[name], inputs(4, length, fmt)
    gpu, sim = Cluster(4, backend=backend, gpus_per_node=2), Cluster(4, gpus_per_node=2)
    for fn in (reduce_scatter, all_reduce):
        for got, want in zip(fn(gpu, xs, group=group), fn(sim, xs, group=group)):
            assert np.array_equal(bits(got), bits(want))
    shards = [x[: length // 2] for x in xs]
    for got, want in zip(all_gather(gpu, shards, group=group), all_gather(sim, shards, group=group)):
        assert np.array_equal(bits(got), bits(want))
    for got, want in zip(broadcast(gpu, xs, 1, group=group), broadcast(sim, xs, 1, group=group)):
        assert np.array_equal(bits(got), bits(want))


@pytest.mark.parametrize("name", list(GROUPS))
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
def test_nccl_collectives_on_group_communicators(backend, name, fmt):
    """Groups of 2: every element is one addition, so NCCL's own reduce-scatter equals the ring's bits."""
    group, xs = GROUPS[name], inputs(4, 64, fmt)
    sim = Cluster(4)
    got = backend.native_reduce_scatter(xs, op="sum", group=group)
    want = reduce_scatter(sim, xs, group=group)
    for g, w in zip(got, want):
        assert np.array_equal(bits(g), bits(w))
    got = backend.native_all_gather([x[:32] for x in xs], group=group)
    want = all_gather(sim, [x[:32] for x in xs], group=group)
    for g, w in zip(got, want):
        assert np.array_equal(bits(g), bits(w))
