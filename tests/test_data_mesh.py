"""DataMesh (parallel/data/multinode/_data_mesh.py): a data-parallel strategy's degrees, group and nodes, decided and
checked in one place that the engine, the meta backend's accounting, the planner and the CLI all read.

- the degrees of every strategy, against a table written by hand (one comment per row);
- one rule, three callers: the engine, the planner and the CLI refuse the same choices, each in its own words;
- the engine's groups are the mesh's groups, and `meta_step`/`measure_stage` given a mesh run the engine the plain
  arguments run;
- a flag that sizes another kind of strategy is not handed to one without a group (the sweep of "all" strategies
  with --shard-group ran into no_reshard and was refused before).
"""

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Adam, Cluster, ZeroEngine
from zerosim.cli.main import main
from zerosim.models.meta import MetaModel
from zerosim.parallel import ParallelDims
from zerosim.parallel.data.multinode import API, DataMesh, Spelling, check_nodes

# (stage, N, G, S given) -> (dp_shard, dp_replicate, group S, secondary S'), by hand from parallel/data/_plan.py's table
HAND = [
    (0, 16, None, None, (16, 1, None, None)),  # plain data parallel: every rank one replica of the whole
    (3, 16, 4, None, (16, 1, None, None)),  # ZeRO-3 on nodes: still one shard per rank of the world
    ("full_shard", 16, 4, None, (16, 1, None, None)),  # FULL_SHARD is ZeRO-3 by name
    ("no_reshard", 16, 4, None, (16, 1, None, None)),  # keeps units gathered: no group of its own
    ("hsdp", 16, 4, None, (4, 4, 4, None)),  # HSDP: S defaults to a node (4), R = 16 / 4
    ("hsdp", 16, 4, 8, (8, 2, 8, None)),  # ... or S given: two nodes per shard group, R = 2
    ("hsdp_no_sync", 16, 4, 2, (2, 8, 2, None)),  # half a node per shard group, R = 8
    ("mics", 16, 4, 16, (16, 1, 16, None)),  # one shard group of all 16: R = 1, nothing to agree on
    ("mics_hierarchical", 16, 4, 8, (8, 2, 8, None)),  # spans two whole nodes: gathered across, then within
    ("hpz", 16, 4, None, (16, 1, 4, 4)),  # hpZ shards over all 16, its secondary piece over a node
    ("reshard_to_group", 16, 4, 2, (16, 1, 2, 2)),  # FSDP2's reshard_after_forward=2
    (1, 6, 8, None, (6, 1, None, None)),  # 6 ranks on a node of 8: one node, partly filled (G becomes 6)
]


@pytest.mark.parametrize("stage, n, g, s, want", HAND)
def test_the_degrees_of_every_strategy(stage, n, g, s, want):
    mesh = DataMesh.of(stage, n, g, s)
    assert (mesh.dims.dp_shard, mesh.dims.dp_replicate, mesh.group, mesh.secondary) == want
    assert mesh.dims == ParallelDims(n, dp_shard=want[0], dp_replicate=want[1])  # the one record, validated
    assert mesh.shards * mesh.replicas == n


@pytest.mark.parametrize("stage, n, g, s, want", [row for row in HAND if row[2] is None or row[1] % row[2] == 0])
def test_the_engine_reads_the_mesh(stage, n, g, s, want):
    """The engine's groups and degrees are the ones DataMesh.groups cuts, on a meta cluster of the same shape."""
    cluster = Cluster(n, backend="meta", gpus_per_node=g)
    engine = ZeroEngine(MetaModel.from_params(4096, layers=2), cluster, stage, Adam(), shard_group=s)
    mesh = DataMesh.of(stage, n, g, s)
    assert engine.mesh == mesh and engine.dims == mesh.dims
    assert engine.groups == mesh.groups(cluster.world)


def run(argv) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


FLAGS = Spelling("--ranks", "--gpus-per-node", "--shard-group", "--hpz-group", "--strategy {}", "--gpus-per-node G",
                 True)


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("stage, n, g, s, api, flags", [
    # ranks that do not fill nodes: Python's names, the flags' names, one rule
    ("hsdp", 12, 8, None, "world_size=12 does not fill nodes of gpus_per_node=8: give a multiple of 8 (e.g. 8 or 16)",
     "--ranks 12 does not fill nodes of --gpus-per-node 8: give a multiple of 8 (e.g. 8 or 16)"),
    # a group that does not divide the world
    ("hsdp", 16, 8, 3, "shard_group=3 does not divide the 16 ranks into equal groups",
     "--shard-group 3 does not divide the 16 ranks into equal groups"),
    ("hpz", 16, 8, 3, "shard_group=3 does not divide the 16 ranks into equal groups",
     "--hpz-group 3 does not divide the 16 ranks into equal groups"),
    # a strategy with a group, and no way to size it
    ("hsdp", 16, None, None, "hsdp needs a group: give Cluster(N, gpus_per_node=G) (the group defaults to a node) "
     "or shard_group", "--strategy hsdp needs a group: give --gpus-per-node G (the group defaults to a node) or "
     "--shard-group"),
    ("mics_hierarchical", 16, 8, 4, "mics_hierarchical gathers across nodes, then within each",
     "mics_hierarchical gathers across nodes, then within each"),
])
def test_one_rule_in_each_callers_words(stage, n, g, s, api, flags):
    with pytest.raises(ValueError) as python:
        DataMesh.of(stage, n, g, s)
    assert api in str(python.value)
    with pytest.raises(ValueError) as cli:
        DataMesh.of(stage, n, g, s, FLAGS)
    assert flags in str(cli.value)
    argv = ["memory", "--params", "7e9", "--ranks", str(n), "--strategy", stage]
    argv += [] if g is None else ["--gpus-per-node", str(g)]
    argv += [] if s is None else ["--hpz-group" if stage == "hpz" else "--shard-group", str(s)]
    code, err = run(argv)
    assert code == 2 and flags in err, err  # the command says exactly what DataMesh says in its words


@given(n=st.integers(1, 40), g=st.integers(1, 12))
def test_the_planner_the_cli_and_the_mesh_accept_the_same_nodes(n, g):
    """check_nodes is the one rule: the planner refuses exactly the (N, G) it refuses, in the same words."""
    from zerosim.analysis.costs import get_preset
    from zerosim.analysis.planner import plan

    try:
        check_nodes(n, g, Spelling(ranks="ranks"))  # as the planner names its arguments
        refused = None
    except ValueError as e:
        refused = str(e)
    config = get_preset("gpt2-small").config
    if refused is None:  # accepted: the planner gets past its checks (a batch that does not split is its own error)
        return
    with pytest.raises(ValueError) as e:
        plan(config, n, g, "h100-80gb", 128, 2 * n, stages=(1,), strategies=("none",), micro_batches=(1,))
    assert str(e.value) == refused


def test_gpus_per_node_refused_in_the_callers_words():
    with pytest.raises(ValueError, match="gpus_per_node must be at least 1, got 0"):
        check_nodes(8, 0)
    with pytest.raises(ValueError, match="--gpus-per-node must be at least 1, got 0"):
        check_nodes(8, 0, FLAGS)
    assert API.value("shard_group", 3) == "shard_group=3" and FLAGS.value("--shard-group", 3) == "--shard-group 3"


def test_meta_accounting_given_a_mesh_runs_what_the_arguments_run():
    from zerosim.analysis.costs import measure_stage

    model = MetaModel.from_params(1 << 20, layers=4)
    by_args = measure_stage(model, 16, "hsdp", gpus_per_node=4, shard_group=8, recipe="fsdp2")[0]
    by_mesh = measure_stage(model, None, None, mesh=DataMesh.of("hsdp", 16, 4, 8), recipe="fsdp2")[0]
    assert by_args == by_mesh and by_mesh["stage"] == "hsdp"


@pytest.mark.slow
def test_the_strategy_sweep_of_all_strategies_takes_a_shard_group():
    """`--strategy all --shard-group S` sizes the strategies that shard over groups; FSDP2's no_reshard has none
    (before: 'shard_group=16 has no meaning for no_reshard', the whole sweep refused)."""
    code, err = run(["timeline", "--model", "gpt2-small", "--sweep", "--sweep-ranks", "16", "--gpus-per-node", "8",
                     "--strategy", "all", "--shard-group", "16", "--json"])
    assert code == 0, err


def test_beside_tp_the_groups_are_the_data_dims():
    """N = 16 on nodes of 8 beside tp = 2. torchtitan's order puts TP innermost: rank = (r·S + s)·T + t, so the TP
    pairs are (0, 1), (2, 3), ... and each data-parallel group holds one TP coordinate (the evens, the odds)."""
    hsdp = DataMesh.of("hsdp", 16, 8, None, tp=2)  # S defaults to a node's data-parallel ranks: G / T = 4
    assert (hsdp.group, hsdp.replicas, hsdp.data_parallel, hsdp.dims.tp) == (4, 2, 8, 2)
    g = hsdp.groups()
    assert set(g.world.members) == {tuple(range(0, 16, 2)), tuple(range(1, 16, 2))}  # "dp": one TP coordinate
    assert set(g.shard.members) == {(0, 2, 4, 6), (8, 10, 12, 14), (1, 3, 5, 7), (9, 11, 13, 15)}  # a node's, S = 4
    assert set(g.replicate.members) == {(t + s, t + s + 8) for t in (0, 1) for s in (0, 2, 4, 6)}  # across nodes
    mics = DataMesh.of("mics_hierarchical", 16, 8, 8, tp=2).groups()  # S = 8 data ranks: two nodes' 4 each
    assert set(mics.intra.members) == {(0, 2, 4, 6), (8, 10, 12, 14), (1, 3, 5, 7), (9, 11, 13, 15)}  # within a node
    assert set(mics.inter.members) == {(t + s, t + s + 8) for t in (0, 1) for s in (0, 2, 4, 6)}  # same slot, 2 nodes
    hpz = DataMesh.of("hpz", 16, 8, None, tp=2)  # shards over all 8 data ranks, a secondary piece over G / T = 4
    assert (hpz.shards, hpz.secondary) == (8, 4)
    assert set(hpz.groups().secondary.members) == {(0, 2, 4, 6), (8, 10, 12, 14), (1, 3, 5, 7), (9, 11, 13, 15)}


@pytest.mark.parametrize("stage, n, g, s, tp, message", [
    (3, 12, None, None, 5, "tensor parallelism of degree 5 does not divide the 12 ranks"),
    ("hsdp", 16, 8, 3, 2, "shard_group=3 does not divide the 8 ranks into equal groups"),  # the data-parallel ranks
    ("mics_hierarchical", 16, 8, 4, 2, "its shard group of 4 ranks, 2 GPUs apart (tp=2), must span whole nodes"),
])
def test_beside_tp_the_mesh_refuses_in_the_data_parallel_ranks(stage, n, g, s, tp, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DataMesh.of(stage, n, g, s, tp=tp)
