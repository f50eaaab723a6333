"""Seed 004 on a 2 × 2 mesh, HSDP (zerosim/replay/_mesh.py): the narrated sends against a table worked out
by hand, and the step's numbers against seed 004's and the engine's bits.

By hand. Seed 004's local gradients (its Stage 1): sample A (x = [1, 3], t = 5) gives [w1, w2, w3, w4] grads
[0, 0, 0, -4.5]; sample B (x = [2, 1], t = 7) gives [-11, -5.5, -5.5, -5.5]. GPUs 0-3 train on A, B, B, A. FSDP2 in
fp16 at N = 4 pre-divides by 2 and post-divides by 2 (`_get_gradient_divide_factors`: pre = 2, post = 4 / 2), so a
GPU sends its gradients ÷ 2: A -> [0, 0, 0, -2.25], B -> [-5.5, -2.75, -2.75, -2.75] (all exact in fp16).
FSDP2 shards each parameter along dim 0: every weight tensor of seed 004 has one row, so position 0 of each shard
group (GPUs 0, 2) owns w1..w4 and position 1 (GPUs 1, 3) a padding chunk of zeros. A 2-rank ring's reduce phase:
position p sends chunk (p − 1) mod 2 — position 0 the padding chunk, position 1 the weights. The replicas'
all-reduce runs over the owned shard cut in halves: layer 2's window (w3, w4) is the second half, sent by position 0
in the add phase; layer 1's (w1, w2) the first half, sent by position 1. Backward visits layer 2, then layer 1.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import bits

from zerosim import Adam, Cluster, ZeroEngine
from zerosim.models.mlp import TinyNet
from zerosim.replay import mesh_replay, narrate_mesh

NV, IB = "intra-node", "inter-node"
HAND = [  # (layer, collective phase, src, dst, link, values)
    ("layer2 grads", "rs", 0, 1, NV, [0, 0]),  # GPU 0 sends node 0's padding chunk to its owner, GPU 1
    ("layer2 grads", "rs", 1, 0, NV, [-2.75, -2.75]),  # B's w3, w4 grads ÷ 2; GPU 0 adds A's [0, -2.25]: [-2.75, -5]
    ("layer2 grads", "rs", 2, 3, NV, [0, 0]),  # node 1: GPU 2 (position 0) sends the padding chunk
    ("layer2 grads", "rs", 3, 2, NV, [0, -2.25]),  # A's ÷ 2, GPU 3 -> GPU 2, which adds B's: [-2.75, -5] again
    ("layer2 grads", "add", 0, 2, IB, [-2.75, -5]),  # node 0's sum crosses to its replica; GPU 2 gets [-5.5, -10]
    ("layer2 grads", "add", 1, 3, IB, [0, 0]),  # the padding replicas add their zeros
    ("layer2 grads", "gather", 2, 0, IB, [-5.5, -10]),  # the four GPUs' sum (÷ 2) comes back to GPU 0
    ("layer2 grads", "gather", 3, 1, IB, [0, 0]),
    ("layer1 grads", "rs", 0, 1, NV, [0, 0]),  # layer 1: the same shape of ring, w1, w2
    ("layer1 grads", "rs", 1, 0, NV, [-5.5, -2.75]),  # B's [-11, -5.5] ÷ 2; GPU 0 adds A's [0, 0]
    ("layer1 grads", "rs", 2, 3, NV, [0, 0]),
    ("layer1 grads", "rs", 3, 2, NV, [0, 0]),  # A's [0, 0] ÷ 2; GPU 2 adds B's: [-5.5, -2.75]
    ("layer1 grads", "add", 2, 0, IB, [-5.5, -2.75]),  # first half: position 1 of the replicate ring (GPU 2) sends
    ("layer1 grads", "add", 3, 1, IB, [0, 0]),
    ("layer1 grads", "gather", 0, 2, IB, [-11, -5.5]),  # GPU 0's sum of the four (÷ 2) goes back to GPU 2
    ("layer1 grads", "gather", 1, 3, IB, [0, 0]),
]
SEED_GRADS = {"w1": -5.5, "w2": -2.75, "w3": -2.75, "w4": -5.0}  # seed 004's averaged gradients (its Stage 1)


@pytest.fixture(scope="module")
def hsdp():
    return mesh_replay("hsdp")


def test_every_send_matches_the_table_by_hand(hsdp):
    got = [(h["tag"], "rs" if h["collective"] == "reduce_scatter" else h["phase"], h["src"], h["dst"], h["tier"],
            h["values"]) for h in hsdp["hops"]]
    assert got == HAND
    assert all(h["bytes"] == 4 and h["dtype"] == "fp16" for h in hsdp["hops"])  # 2 fp16 values a send
    # 8 sends within nodes, 8 across, 4 B each: what the trace's per-tier totals say for the reduction
    assert hsdp["reduction_bytes"] == {NV: 32, IB: 32}
    assert (hsdp["pre_divide"], hsdp["post_divide"]) == (2, 2)


def test_the_step_lands_on_seed_004s_numbers_and_the_engines_bits(hsdp):
    assert hsdp["owns"] == [["w1", "w2", "w3", "w4"], ["padding"] * 4] * 2
    assert hsdp["grad32"] == {0: SEED_GRADS, 1: {}, 2: SEED_GRADS, 3: {}}
    # the new masters: bit for bit those of seed 004's own two-GPU run (ZeRO-1, the seed's Stage 1), whose average
    # is the same; seed 004 prints them rounded: 2.1, -2.9, 1.1, 0.6
    flat = ZeroEngine(TinyNet(), Cluster(2), 1, Adam(lr=0.1), "fp16-mixed")
    flat.step(TinyNet.seed_batches())
    seed = np.concatenate(flat.master_shards())[:4]
    for r in (0, 2):
        narrated = np.array(list(hsdp["master"][r].values()), np.float32)
        assert np.array_equal(bits(narrated), bits(seed))
        assert np.allclose(narrated, [2.1, -2.9, 1.1, 0.6], atol=1e-6)


def test_the_narration_says_who_adds_what_over_which_link(hsdp):
    text = narrate_mesh(hsdp)
    assert ("[layer2 grads] all-reduce (add) over the replicate group: GPU 0 -> GPU 2 (InfiniBand, across nodes): "
            "[-2.75, -5], 4 B; GPU 2 adds it to its own chunk") in text
    assert ("[layer1 grads] reduce-scatter over the shard group: GPU 1 -> GPU 0 (NVLink, within a node): "
            "[-5.5, -2.75], 4 B; GPU 0 adds it to its own chunk") in text
    assert "Gradient bytes sent: 32 B over NVLink, 32 B over InfiniBand" in text


def test_the_cli_replays_the_mesh(capsys):
    from zerosim.cli.main import main

    assert main(["replay", "--mesh", "2x2", "--strategy", "hsdp"]) == 0
    assert "GPU 3 -> GPU 2 (NVLink, within a node): [0, -2.25]" in capsys.readouterr().out


@pytest.mark.bad_input("command line", unchanged="nothing runs: refused before the engine is built")
def test_the_mesh_replay_refuses_the_flat_replays_options(capsys):
    from zerosim.cli.main import main

    assert main(["replay", "--mesh", "2x2", "--steps", "3"]) == 2
    err = capsys.readouterr().err
    assert "--mesh replays one step of --strategy (hsdp or mics)" in err and err.count("\n") == 1


def test_mics_on_the_same_mesh_reads_seed_004s_average_too():
    """MiCS (DeepSpeed's ceil(n/2)-element pieces: w1 | w2 of layer 1's two weights, w3 and w4 each whole on position
    0) reduces over the same groups: together the two positions of a shard group read seed 004's four averages."""
    mics = mesh_replay("mics")
    assert mics["pre_divide"] is None  # FSDP2's divide factors are not MiCS's
    assert {**mics["grad32"][0], **mics["grad32"][1]} == SEED_GRADS
    assert mics["grad32"][2] == mics["grad32"][0] and mics["grad32"][3] == mics["grad32"][1]  # the replicas agree
    assert {h["tier"] for h in mics["hops"] if h["group"] == "replicate"} == {IB}
    assert {h["tier"] for h in mics["hops"] if h["group"] == "shard"} == {NV}
