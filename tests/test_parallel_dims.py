"""ParallelDims: every degree in one validated record, and the groups of its mesh, against a naive twin that reads
each rank's coordinates with np.unravel_index; torchtitan's published layouts as a table; the data-parallel groups
it gives equal to the ones the strategies were built with before (Groups.blocks / Groups.strided)."""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Cluster
from zerosim.cluster import Groups
from zerosim.parallel import FLATTENED, ORDER, ParallelDims
from zerosim.parallel.data import STRATEGIES
from zerosim.parallel.data.multinode import mesh_groups


def naive_groups(degrees: dict, dims: tuple) -> set:
    """The ranks that differ only along `dims`, each group in row-major order of those dims: by brute force."""
    shape = tuple(degrees[d] for d in ORDER)
    axes = [ORDER.index(d) for d in dims]
    by_rest = {}
    for r in range(int(np.prod(shape))):
        c = np.unravel_index(r, shape)
        rest = tuple(c[a] for a in range(len(ORDER)) if a not in axes)
        by_rest.setdefault(rest, []).append((tuple(c[a] for a in axes), r))
    return {tuple(r for _, r in sorted(g)) for g in by_rest.values()}


@given(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=5, max_size=5))
def test_every_group_equals_the_naive_twin(sizes):
    degrees = dict(zip(ORDER, sizes))
    dims = ParallelDims(int(np.prod(sizes)), **degrees)
    for d in ORDER:
        assert set(dims.groups(d).members) == naive_groups(degrees, (d,)), d
    for name, joined in FLATTENED.items():
        assert set(dims.groups(name).members) == naive_groups(degrees, joined), name
    assert dims.groups("world").members == (tuple(range(dims.world_size)),)


# torchtitan's published runs (docs/performance.md at commit b5bcd76) as degrees, with what their mesh must be:
# (world, degrees, the dp_shard it infers, the TP group of rank 0, the dp_shard group of rank 0)
TABLE = [
    (8, {}, 8, (0,), tuple(range(8))),  # Llama 3.1 8B, FSDP 8 on one node: every rank one shard
    (256, {"tp": 8}, 32, tuple(range(8)), tuple(range(0, 256, 8))),  # Llama 3.1 70B, FSDP 32 x TP 8: TP in a node
    (128, {"dp_replicate": 16}, 8, (0,), tuple(range(8))),  # HSDP: 8-way shards in a node, 16 replicas across
]


@pytest.mark.parametrize("world, given_degrees, dp_shard, tp0, shard0", TABLE)
def test_torchtitans_layouts(world, given_degrees, dp_shard, tp0, shard0):
    dims = ParallelDims(world, **given_degrees)
    assert dims.dp_shard == dp_shard  # -1: what the world leaves (torchtitan's _validate)
    assert dims.groups("tp").group_of(0) == tp0
    assert dims.groups("dp_shard").group_of(0) == shard0
    assert dims.dp == dims.dp_replicate * dims.dp_shard


@pytest.mark.parametrize("n, s", [(4, 2), (8, 2), (8, 4), (12, 3), (16, 8)])
def test_the_strategies_groups_are_the_ones_they_always_were(n, s):
    for name in ("hsdp", "mics"):
        groups = mesh_groups(STRATEGIES[name], Cluster(n, gpus_per_node=s, backend="meta"), s)
        assert groups.shard == Groups.blocks(n, s, "shard")
        assert groups.replicate == Groups.strided(n, s, "replicate")
        assert (groups.dims.dp_replicate, groups.dims.dp_shard, groups.dims.tp) == (n // s, s, 1)


@pytest.mark.parametrize("bad, match", [
    (dict(world_size=12, dp_shard=4, tp=2), "pp 1 × dp_replicate 1 × dp_shard 4 × cp 1 × tp 2 = 8 GPUs, but the world"),
    (dict(world_size=12, tp=5), "do not divide|does not divide"),
    (dict(world_size=8, dp_shard=-1, tp=-1), "only one degree may be -1"),
    (dict(world_size=8, tp=0), "tp must be a positive integer"),
    (dict(world_size=8, tp=True), "tp must be a positive integer"),
    (dict(world_size=8, tp=2.0), "tp must be a positive integer"),
    (dict(world_size=-1), "world_size must be a positive integer"),
])
def test_bad_degrees_are_refused_by_name(bad, match):
    with pytest.raises(ValueError, match=match):
        ParallelDims(**bad)


def test_every_degree_one_is_the_flat_world():
    dims = ParallelDims(6)
    assert dims.degrees == {"pp": 1, "dp_replicate": 1, "dp_shard": 6, "cp": 1, "tp": 1}
    assert dims.enabled == ("dp_shard",)
    assert dims.groups("dp_shard").is_world
    assert all(g == (r,) for r, g in enumerate(dims.groups("tp").members))
    with pytest.raises(ValueError, match="no dim 'ep'"):
        dims.groups("ep")


def test_groups_of_a_dim_are_a_partition_of_the_world():
    dims = ParallelDims(24, tp=2, dp_replicate=3)
    for d in (*ORDER, *FLATTENED):
        flat = sorted(itertools.chain.from_iterable(dims.groups(d).members))
        assert flat == list(range(24))
