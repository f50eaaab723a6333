"""The plans (parallel/data/_plan.py): each stage's sharding as data, and the one function every buffer's size comes
from.

Rows are seed 001's table (ZeRO paper, §5: P_os, P_os+g, P_os+g+p): which of a rank's model states it holds
as a 1/N shard, and which collective runs when. `buffer_sizes` is then checked against numbers worked out by
hand, and against what the ledgers of a numpy and a meta-backend engine actually hold after init.
"""

import pytest

from zerosim import MLP, Adam, Cluster, ZeroEngine
from zerosim.analysis.costs import MemoryConfig, model_state_memory
from zerosim.models.meta import MetaModel
from zerosim.parallel.data import PLANS, buffer_sizes, get_plan
from zerosim.parallel.data.layouts import FlatLayout

# stage -> (held as shards, end-of-backward collective, refresh after the update, gathers params per unit)
TABLE = {
    0: (set(), "all_reduce", False, False),  # plain data parallel: everything whole, one all-reduce
    1: ({"master", "optimizer"}, "reduce_scatter", True, False),  # P_os: reduce-scatter, then all-gather params
    2: ({"grads", "master", "optimizer"}, None, True, False),  # P_os+g: grads reduce-scattered unit by unit
    3: ({"params", "grads", "master", "optimizer"}, None, False, True),  # P_os+g+p: params gathered per use
}


@pytest.mark.parametrize("stage", sorted(TABLE))
def test_each_plan_is_seed_001s_row(stage):
    plan = get_plan(stage)
    sharded, end, refresh, gathers = TABLE[stage]
    assert {b for b in ("params", "grads", "master", "optimizer") if plan.shards(b)} == sharded
    assert (plan.end_of_backward, plan.refresh_after_update, plan.gathers_params) == (end, refresh, gathers)
    assert plan.reduces_per_unit == (end is None)


def test_muon_reduce_scatters_where_the_plan_does():
    # Moonshot's Distributed Muon: reduce-scatter G, then bring the matrices together (parallel/data/muon)
    assert PLANS[1].end_reduction(elementwise_optimizer=False) == "reduce_scatter"
    assert PLANS[1].end_reduction() == "reduce_scatter" and PLANS[0].end_reduction(False) == "all_reduce"


def test_buffer_sizes_by_hand():
    # P = 43 on N = 3: s = ceil(43/3) = 15, Ψ = 45; a sharded buffer holds 15 elements, a whole one 45
    layout = FlatLayout(43, 3, ((0, 43),))
    assert buffer_sizes(PLANS[0], layout) == {"params": 45, "grads": 45, "master": 45, "optimizer": 45}
    assert buffer_sizes(PLANS[1], layout) == {"params": 45, "grads": 45, "master": 15, "optimizer": 15}
    assert buffer_sizes(PLANS[2], layout) == {"params": 45, "grads": 15, "master": 15, "optimizer": 15}
    assert buffer_sizes(PLANS[3], layout) == {"params": 15, "grads": 15, "master": 15, "optimizer": 15}


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("backend", ["numpy", "meta"])
def test_the_ledgers_hold_what_buffer_sizes_says(stage, backend):
    # bf16-mixed Adam: params and grads 2 bytes, master 4, m and v 4 each
    model = MLP([4, 5, 3]) if backend == "numpy" else MetaModel.from_params(43, layers=2)
    cluster = Cluster(3, backend=backend, **({"hosted": "all"} if backend == "meta" else {}))
    engine = ZeroEngine(model, cluster, stage, Adam(), "bf16-mixed")
    n = buffer_sizes(engine.plan, engine.layout)
    want = {"params": 2 * n["params"], "grads": 2 * n["grads"], "master": 4 * n["master"],
            "optim:m": 4 * n["optimizer"], "optim:v": 4 * n["optimizer"]}
    for rank in cluster.ranks:
        assert rank.ledger.by_kind() == want


def test_the_formulas_shard_what_the_plans_shard():
    # zerosim.analysis.costs reads its sharding from the plans: 7.5B params on 64 ranks, the ZeRO paper's Figure 1
    config = MemoryConfig(padding="none")
    gb = [round(model_state_memory(7.5e9, 64, stage, config).total / 1e9, 1) for stage in range(4)]
    assert gb == [120.0, 31.4, 16.6, 1.9]
