"""A strategy asked for what it cannot do is a clear error, raised before any rank allocates anything."""

from __future__ import annotations

import pytest

from zerosim import MLP, Adam, Cluster, Reference, ZeroEngine


@pytest.mark.bad_input("engine arguments", unchanged=True)
@pytest.mark.parametrize("strategy, options, cluster, message", [
    ("hsdp", dict(recipe="fsdp2"), dict(),
     r"hsdp needs a group: give Cluster\(N, gpus_per_node=G\) \(the group defaults to a node\) or shard_group"),
    ("hsdp", dict(recipe="fsdp2", shard_group=3), dict(gpus_per_node=2), "shard_group=3 does not divide the 4 ranks"),
    ("hsdp", dict(recipe="fsdp2", shard_group=0), dict(), "shard_group must be a positive integer"),
    ("full_shard", dict(shard_group=2), dict(), "shard_group=2 has no meaning for full_shard"),
    ("hsdp", dict(recipe="seeds"), dict(gpus_per_node=2), "cuts every unit into equal pieces.*use reduction 'fsdp2'"),
    ("hsdp", dict(recipe="deepspeed-zero3"), dict(gpus_per_node=2), "hsdp is fsdp2's.*'fsdp2' or 'seeds'"),
    ("mics", dict(recipe="fsdp2"), dict(gpus_per_node=2), "mics is deepspeed's"),
    ("mics_hierarchical", dict(recipe="deepspeed-zero3"), dict(gpus_per_node=2), "must span whole nodes"),
    ("hsdpp", dict(), dict(), "ZeRO stage must be one of .* or a strategy"),
])
def test_a_strategy_refuses_what_it_cannot_do(strategy, options, cluster, message):
    c = Cluster(4, **cluster)
    with pytest.raises(ValueError, match=message):
        ZeroEngine(MLP([3, 2]), c, strategy, Adam(), "fp16-mixed", **options)
    assert all(not r.ledger.live for r in c.ranks)  # refused before anything was allocated


def test_what_is_refused_above_runs_where_it_makes_sense():
    # the control rows: hpZ shards over the world (any recipe, a flat cluster with an explicit S); HSDP with FSDP2's
    ZeroEngine(MLP([3, 2]), Cluster(4), "hpz", Adam(), "fp16-mixed", shard_group=2)
    ZeroEngine(MLP([3, 2]), Cluster(4, gpus_per_node=2), "hsdp", Adam(), "fp16-mixed", recipe="fsdp2")
    engine = ZeroEngine(MLP([3, 2]), Cluster(4, gpus_per_node=2), "mics", Adam(), "fp16-mixed")  # no recipe named:
    assert engine.recipe.reduction == "deepspeed-zero3"  # ... its framework's


@pytest.mark.bad_input("engine arguments")
def test_the_oracle_needs_the_shard_group_too():
    with pytest.raises(ValueError, match="hsdp needs shard_group=S dividing world_size 4"):
        Reference(MLP([3, 2]), Adam(), "fp16-mixed", world_size=4, recipe="fsdp2", strategy="hsdp")
