"""The two-tier timeline (zerosim/viz/_tier_timeline.py): each collective drawn on the link its groups use.

GPT-3 175B in blocks has U = 99 units (wte, wpe, 96 blocks, ln_f), 1,024 ranks in nodes of 8, one step, no
activation checkpointing: a unit is gathered twice (forward, backward) and its gradients reduce-scattered once.
By hand, which row each call lands in (a ring is on InfiniBand as soon as one hop leaves a node):

    FULL_SHARD   every ring spans the world: 2U gathers and U reduce-scatters on InfiniBand, nothing on NVLink
    HSDP, S = 8  gathers and reduce-scatters within the node: 2U + U on NVLink; the replicas' all-reduce (stride 8,
                 every hop across nodes) is recorded as its two ring phases: 2U calls on InfiniBand
    MiCS, S = 8  as HSDP with one micro-step (the boundary is every step)
    hpZ, S' = 8  forward's gathers and the reduce-scatters over the world: U + U on InfiniBand; backward's gathers
                 from the node's secondary pieces: U on NVLink
"""

from __future__ import annotations

from collections import Counter

import pytest

from zerosim.analysis.costs import get_preset
from zerosim.analysis.planner import strategy_timeline
from zerosim.cli.figures_cmd import TIER_TIMELINE
from zerosim.models.meta import MetaModel
from zerosim.parallel.data import CommSchedule
from zerosim.viz import tier_rows, tier_timeline_figure
from zerosim.viz._tier_timeline import ROWS

U = 99  # 96 blocks + wte + wpe + ln_f
NV, IB = ROWS[1], ROWS[2]
HAND = {
    "full_shard": {NV: {}, IB: {"gather params": 2 * U, "reduce grads": U}},
    "hsdp": {NV: {"gather params": 2 * U, "reduce grads": U}, IB: {"replicate grads": 2 * U}},
    "mics": {NV: {"gather params": 2 * U, "reduce grads": U}, IB: {"replicate grads": 2 * U}},
    "hpz": {NV: {"gather params": U}, IB: {"gather params": U, "reduce grads": U}},
}


@pytest.fixture(scope="module")
def runs():
    gpt3 = MetaModel.from_preset(get_preset("gpt3-175b"), unit="block")
    assert len(gpt3.layers) == U
    return {name: strategy_timeline(gpt3, 1024, name, 8, group, comm=CommSchedule.fsdp(forward_prefetch=True),
                                    tokens=20480)[0] for _, name, group in TIER_TIMELINE}


def test_every_call_sits_on_the_tier_worked_out_by_hand(runs):
    for name, result in runs.items():
        rows = tier_rows(result)
        got = {row: dict(Counter(cat for _, _, cat in rows[row])) for row in (NV, IB)}
        assert got == HAND[name], name
        assert rows[ROWS[0]]  # the compute row is drawn too


@pytest.mark.slow
def test_the_figure_draws_each_row_with_its_calls(runs):
    fig = tier_timeline_figure(runs)
    for ax, name in zip(fig.axes, runs):
        drawn = Counter()
        for coll in ax.collections:
            gid = coll.get_gid() or ""
            if gid.startswith((NV, IB)):
                row, cat = gid.rsplit(":", 1)
                drawn[(row, cat)] += len(coll.get_paths())
        assert dict(drawn) == {(row, cat): n for row, cats in HAND[name].items() for cat, n in cats.items()}, name
