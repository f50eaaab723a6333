"""Who holds what on a 2 × 4 mesh (zerosim/viz/_mesh_ownership.py), against ownership worked out by hand.

8 ranks on 2 nodes of G = 4, S = 4, R = 2, MLP [8, 16, 8]: Ψ = 280, every parameter cuts evenly into 8 (and 4), so
no padding and the fractions are exact:

    strategy     W, G, OS of rank r                      W′ (hpZ's secondary piece)
    full_shard   shard r of 8: width 1/8 at r/8          -
    hsdp         shard r mod 4 of 4: 1/4 at (r mod 4)/4  -     (ranks r and r + 4 are replicas)
    mics         shard r mod 4 of 4: 1/4 at (r mod 4)/4  -
    hpz          shard r of 8: 1/8 at r/8                M = N/S = 2 primary shards: 1/4 at (r mod 4)/4
"""

from __future__ import annotations

import pytest

from zerosim.viz import measure_mesh_ownership, mesh_ownership_figure

STATES = ("params", "grads", "master", "optim:m", "optim:v")


def by_hand(strategy: str, r: int) -> dict:
    """{kind: (fraction, offset)} of rank r, from the table above."""
    if strategy in ("hsdp", "mics"):
        out = dict.fromkeys(STATES, (1 / 4, (r % 4) / 4))  # position r mod 4 of its node's shard group
    else:
        out = dict.fromkeys(STATES, (1 / 8, r / 8))  # the world's shard r
    if strategy == "hpz":
        out["secondary"] = (1 / 4, (r % 4) / 4)  # primary shards 2p, 2p + 1 of position p = r mod 4
    return out


@pytest.fixture(scope="module")
def runs():
    return measure_mesh_ownership()


def test_every_rank_holds_the_shards_worked_out_by_hand(runs):
    assert [run["strategy"] for run in runs] == ["full_shard", "hsdp", "mics", "hpz"]
    for run in runs:
        assert run["padded"] == 280
        for r, row in enumerate(run["ranks"]):
            assert row == by_hand(run["strategy"], r), (run["strategy"], r)


def test_replicas_and_groups(runs):
    groups = {run["strategy"]: (run["shard_groups"], run["replicas"]) for run in runs}
    assert groups["hsdp"] == groups["mics"] == (((0, 1, 2, 3), (4, 5, 6, 7)), 2)  # one shard group per node
    assert groups["full_shard"] == groups["hpz"] == (((0, 1, 2, 3, 4, 5, 6, 7),), 1)
    # resting bytes by hand, fp16-mixed, Adam, s = Ψ/8 = 35 (world) or Ψ/4 = 70 (a node):
    # full_shard/hpz 2s + 2s + 4s + 4s + 4s = 16s = 560; MiCS 16·70 = 1120;
    # HSDP keeps its reduced gradients in fp32 (FSDP2's sharded grads at the params' dtype, fp32 here): 18·70 = 1260
    bytes_ = {run["strategy"]: set(run["bytes"]) for run in runs}
    assert bytes_ == {"full_shard": {560}, "hpz": {560}, "mics": {1120}, "hsdp": {1260}}


@pytest.mark.slow
def test_the_figure_draws_those_blocks():
    fig = mesh_ownership_figure()
    for ax, strategy in zip(fig.axes, ("full_shard", "hsdp", "mics", "hpz")):
        blocks = [(p.get_gid(), round(p.get_x() % 1.12, 9), round(p.get_width(), 9)) for p in ax.patches
                  if str(p.get_gid()).startswith("kind:")]
        expected = [(f"kind:{k}", round(off, 9), round(frac, 9)) for r in range(8)
                    for k, (frac, off) in by_hand(strategy, r).items()]
        assert sorted(blocks) == sorted(expected), strategy
