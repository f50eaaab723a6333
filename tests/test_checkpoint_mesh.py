"""Checkpoints of a mesh run: each shard written once (replicas checked first), resumed bit for bit on the same mesh,
resharded between a mesh and a flat cluster (zerosim/checkpoint/_replicas.py, save.py, load.py).

Letters: N ranks, S the shard group, R = N / S replicas, s the shard, P parameters.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
from helpers import as_version_1, bits

from zerosim import MLP, Adam, Cluster, Reference, ZeroEngine
from zerosim import checkpoint as ckpt
from zerosim.checkpoint import CheckpointError, read_state

WIDTHS = [4, 6, 3]  # w (6, 4), b (6,), w (3, 6), b (3,): P = 51


def batches(n: int, K: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    one = [[(rng.standard_normal((3, 4)) * 4.0, rng.standard_normal((3, 3))) for _ in range(K)] for _ in range(n)]
    return one if K > 1 else [x[0] for x in one]


def engine(strategy, nodes, gpus, S, precision="fp16-mixed", K=1):
    model = MLP(WIDTHS)
    return ZeroEngine(model, Cluster(nodes * gpus, gpus_per_node=gpus), strategy, Adam(lr=1e-2), precision,
                      params=model.init_params(np.random.default_rng(5)), accumulation_steps=K, shard_group=S)


def same_bits(a, b) -> bool:
    ok = np.array_equal(bits(a.full_master()), bits(b.full_master()))
    ok &= np.array_equal(bits(a.full_params()), bits(b.full_params()))
    return ok and all(np.array_equal(bits(v), bits(b.full_optimizer_state()[k]))
                      for k, v in a.full_optimizer_state().items())


# (strategy, nodes, GPUs per node, S): R = 2 replicas for HSDP and MiCS; hpZ and FSDP2's reshard_after_forward=S
# shard over all N (their secondary piece is transient, not saved); MiCS's hierarchy spans nodes of 1 GPU.
MESHES = [("hsdp", 2, 2, 2), ("hsdp_no_sync", 2, 2, 2), ("mics", 2, 2, 2), ("mics_hierarchical", 4, 1, 2),
          ("hpz", 2, 2, 2), ("reshard_to_group", 2, 2, 2), ("hsdp", 3, 2, 2)]


@pytest.mark.parametrize("strategy,nodes,gpus,S", MESHES)
def test_a_resume_on_the_same_mesh_is_the_uninterrupted_run(tmp_path, strategy, nodes, gpus, S):
    n, K = nodes * gpus, 2
    whole = engine(strategy, nodes, gpus, S, K=K)
    first = engine(strategy, nodes, gpus, S, K=K)
    for step in range(2):
        assert whole.step(batches(n, K, step)) == first.step(batches(n, K, step))
    ckpt.save(first, str(tmp_path))
    resumed = ckpt.load(str(tmp_path), Cluster(n, gpus_per_node=gpus), MLP(WIDTHS))
    assert resumed.plan.name == strategy and resumed.groups.shard.size == first.groups.shard.size
    state = read_state(str(tmp_path))  # and the oracle, started from the saved whole vectors
    ref = Reference(MLP(WIDTHS), Adam(lr=1e-2), state.precision, world_size=n, accumulation_steps=K,
                    strategy=strategy, shard_group=S)
    ref.set_state(state.params, state.master, state.optimizer, state.t)
    for step in range(2, 4):
        assert resumed.step(batches(n, K, step)) == whole.step(batches(n, K, step)) == ref.step(batches(n, K, step))
    assert resumed.t == whole.t == ref.t == 4 and same_bits(resumed, whole)
    assert np.array_equal(bits(resumed.full_master()), bits(ref.master()))


@pytest.mark.bad_input("checkpoint files", unchanged=True)
def test_a_mesh_checkpoint_on_ranks_its_group_does_not_divide_is_refused_before_anything_is_built(tmp_path):
    e = engine("hsdp", 2, 2, 2)
    e.step(batches(4, 1, 0))
    folder = ckpt.save(e, str(tmp_path))
    before = sorted((p, os.path.getsize(os.path.join(folder, p))) for p in os.listdir(folder))
    cluster = Cluster(3)
    with pytest.raises(ValueError, match=r"shard_group=2 does not divide the 3 ranks"):
        ckpt.load(str(tmp_path), cluster, MLP(WIDTHS))
    assert all(not r.ledger.live for r in cluster.ranks)
    assert sorted((p, os.path.getsize(os.path.join(folder, p))) for p in os.listdir(folder)) == before


def data_bytes(path) -> int:
    """A safetensors file's tensor bytes: its size less the 8-byte header length and the JSON header."""
    with open(path, "rb") as f:
        (header,) = struct.unpack("<Q", f.read(8))
    return os.path.getsize(path) - 8 - header


@pytest.mark.parametrize("nodes", [2, 3])
def test_each_shard_is_written_once_by_replica_0(tmp_path, nodes):
    # HSDP on nodes × 2 GPUs, S = 2: FSDP2's dim-0 chunks over 2 ranks (ceil(rows / 2) rows, padded):
    #   w (6, 4): 3 rows of 4 = 12;  b (6,): 3;  w (3, 6): 2 rows of 6 = 12;  b (3,): 2     s = 29
    # per element: fp16 params 2 B + fp32 master 4 B + Adam's m and v 4 B each = 14 B    -> 29 · 14 = 406 B a file
    # S = 2 files whatever R is: 812 B of tensors (R copies would be R · 812).
    e = engine("hsdp", nodes, 2, 2)
    e.step(batches(nodes * 2, 1, 0))
    folder = ckpt.save(e, str(tmp_path))
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    assert files == ["rank00000.safetensors", "rank00001.safetensors"] and e.layout.shard_size == 29
    assert [data_bytes(os.path.join(folder, f)) for f in files] == [406, 406]
    m = json.load(open(os.path.join(folder, "manifest.json")))
    assert m["world_size"] == 2 and m["stage"] == 3
    assert m["mesh"] == {"strategy": "hsdp", "shard_group": 2, "replicas": nodes, "world_size": 2 * nodes,
                         "gpus_per_node": 2, "writers": [0, 1]}
    assert ckpt.save(e, str(tmp_path)) == folder  # the same state again: recognised by its manifest, kept
    assert ckpt.saved_settings(str(tmp_path))["ranks"] == 2 * nodes  # a resume's rank count: the mesh's N
    assert (f"strategy hsdp on {2 * nodes} ranks (2 per node), shard_group 2, {nodes} replica(s): each shard "
            "written once, 2 files by ranks [0, 1]") in ckpt.inspect(str(tmp_path)).splitlines()[1]
    state = read_state(str(tmp_path))  # the files are replica 0's shards: they put back the engine's whole vectors
    assert np.array_equal(bits(state.master), bits(e.full_master()))


@pytest.mark.bad_input("checkpoint files", unchanged=True)
@pytest.mark.parametrize("buffer", ["master", "params", "optim.v"])
def test_a_replica_that_differs_is_refused_before_anything_is_written(tmp_path, buffer):
    e = engine("hsdp", 2, 2, 2)
    e.step(batches(4, 1, 0))
    ckpt.save(e, str(tmp_path), tag="before")
    before = {p: open(p, "rb").read() for p in (str(x) for x in tmp_path.rglob("*")) if os.path.isfile(p)}
    rank = e.cluster.ranks[3]  # replica of rank 1 (shard 1)
    held = {"master": rank.master, "params": rank.params, "optim.v": rank.optim.get("v")}[buffer].array
    held[5] = held[5] + held.dtype.type(1)  # one element, one replica
    with pytest.raises(ValueError, match=rf"rank 3's '{buffer}' differs from rank 1's, its replica \(shard 1 of "
                                         r"hsdp, shard_group=2\).*nothing was written"):
        ckpt.save(e, str(tmp_path))
    after = {p: open(p, "rb").read() for p in (str(x) for x in tmp_path.rglob("*")) if os.path.isfile(p)}
    assert after == before  # no new tag, `latest` unchanged


def test_a_mesh_checkpoint_reshards_to_a_flat_cluster_and_continues_like_the_oracle(tmp_path):
    saved = engine("hsdp", 2, 2, 2, precision="bf16-mixed")
    for step in range(2):
        saved.step(batches(4, 1, step))
    ckpt.save(saved, str(tmp_path))
    state = read_state(str(tmp_path))
    for m in (3, 4):
        flat = ckpt.load(str(tmp_path), Cluster(m), MLP(WIDTHS), stage=3)
        assert flat.plan.name == "" and same_bits(flat, saved)  # the consolidated vectors, cut anew
        ref = Reference(MLP(WIDTHS), Adam(lr=1e-2), state.precision, world_size=m)  # FSDP2's recipe, saved
        ref.set_state(state.params, state.master, state.optimizer, state.t)
        for step in range(2, 4):
            b = batches(m, 1, step)
            assert flat.step(b) == ref.step(b)
        assert np.array_equal(bits(flat.full_master()), bits(ref.master()))
        assert np.array_equal(bits(flat.full_params()), bits(ref.compute_params()))


@pytest.mark.parametrize("source", ["flat", "hsdp S=3"])
def test_a_flat_or_other_mesh_checkpoint_reshards_onto_a_mesh_and_continues_like_the_oracle(tmp_path, source):
    model = MLP(WIDTHS)
    if source == "flat":
        saved = ZeroEngine(model, Cluster(3), 2, Adam(lr=1e-2), "fp16-mixed", params=model.init_params())
    else:
        saved = engine("hsdp", 2, 3, 3)
    n_saved = saved.cluster.world_size
    for step in range(2):
        saved.step(batches(n_saved, 1, step))
    ckpt.save(saved, str(tmp_path))
    state = read_state(str(tmp_path))
    mesh = ckpt.load(str(tmp_path), Cluster(4, gpus_per_node=2), model, stage="hsdp", shard_group=2)
    assert mesh.groups.replicas == 2 and same_bits(mesh, saved)
    ref = Reference(model, Adam(lr=1e-2), state.precision, world_size=4, recipe="fsdp2", strategy="hsdp",
                    shard_group=2)
    ref.set_state(state.params, state.master, state.optimizer, state.t)
    for step in range(2, 4):
        b = batches(4, 1, step)
        assert mesh.step(b) == ref.step(b)
    assert np.array_equal(bits(mesh.full_master()), bits(ref.master()))


def edited(tmp_path, change):
    e = engine("hsdp", 2, 2, 2)
    e.step(batches(4, 1, 0))
    folder = ckpt.save(e, str(tmp_path))
    path = os.path.join(folder, "manifest.json")
    m = as_version_1(json.load(open(path)))  # what the mesh's own checks say (a version-2 edit fails its checksum)
    change(m)
    json.dump(m, open(path, "w"))
    return open(path, "rb").read()


@pytest.mark.bad_input("checkpoint files", unchanged=True)
@pytest.mark.parametrize("change,match", [
    (lambda m: m["mesh"].update(replicas=3), r"mesh.replicas is 3; hsdp with shard_group 2 on 4 ranks has 2"),
    (lambda m: m["mesh"].update(strategy="zero9"), r"mesh.strategy must be a strategy of stage 3"),
    (lambda m: m["mesh"].update(shard_group=3), r"mesh.shard_group must be null or a positive integer dividing"),
    (lambda m: m["mesh"].update(shard_group=1, replicas=4), r"world_size is 2, but hsdp on 4 ranks writes 1 file"),
])
def test_an_edited_mesh_in_the_manifest_is_refused(tmp_path, change, match):
    before = edited(tmp_path, change)
    cluster = Cluster(4, gpus_per_node=2)
    with pytest.raises(CheckpointError, match=match):
        ckpt.load(str(tmp_path), cluster, MLP(WIDTHS))
    assert all(not r.ledger.live for r in cluster.ranks)  # nothing was built
    assert open(os.path.join(str(tmp_path), "step000001", "manifest.json"), "rb").read() == before
