"""The ledgers and the trace of the strategies for many nodes, against formulas worked out by hand.

Letters: N ranks, G GPUs per node, S the strategy's group, R = N / S replicas, M = N / S primary shards per
secondary piece, c_u a unit's piece of one rank's shard (each parameter cut on its own: DeepSpeed's ceil(n/k)
elements, FSDP2's ceil(rows/k) rows), s = Σ_u c_u the shard.

    hpZ's secondary piece      M·c_u per unit (the pieces of M primary shards), 2 bytes each in fp16: at the
                               end of forward every unit's is live, 2·M·s bytes = 2Ψ/S plus padding
    MiCS's group shards        params 2·s_S, grads 2·s_S (fp16), master 4·s_S, Adam 8·s_S with s_S = Σ_p ⌈n_p/S⌉:
                               16Ψ/S plus padding, where ZeRO-3 holds 16Ψ/N
    bytes per link tier        every ring phase over n ranks: each rank sends (n−1)·c elements; a world ring over
                               2 nodes of 4 crosses nodes at 2 of its 8 hops; node groups stay on NVLink; replicate
                               groups (stride S = G) cross at every hop
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from zerosim import MLP, Adam, Cluster, ZeroEngine
from zerosim.analysis.costs import get_preset
from zerosim.models.meta import MetaModel


def pieces(model, k: int, dim0: bool) -> dict:
    """{layer: c_u} by hand: each parameter cut in k, ⌈n/k⌉ elements (DeepSpeed) or ⌈rows/k⌉ rows (FSDP2)."""
    out = {}
    for spec in model.specs:
        if dim0:
            rows = spec.shape[0]
            c = math.ceil(rows / k) * (spec.size // rows)
        else:
            c = math.ceil(spec.size / k)
        out[spec.layer] = out.get(spec.layer, 0) + c
    return out


def step(strategy, recipe, n=8, g=4, S=4, K=1):
    model = MLP([8, 16, 8])
    options = {"shard_group": S} if strategy in ("hsdp", "mics", "hpz") else {}
    engine = ZeroEngine(model, Cluster(n, gpus_per_node=g), strategy, Adam(), "fp16-mixed", recipe=recipe,
                        accumulation_steps=K, **options)
    rng = np.random.default_rng(0)
    engine.step([[(rng.standard_normal((2, 8)), rng.standard_normal((2, 8))) for _ in range(K)] for _ in range(n)])
    return model, engine


def tier_bytes(engine) -> tuple:
    t = engine.cluster.trace.bytes_by_tier()
    return t["intra-node"], t["inter-node"]


# -- bytes per link tier: N = 8 ranks on 2 nodes of G = 4; fp16 on the wire (2 bytes); two units with weights ------
def test_full_shard_crosses_nodes_at_two_of_the_world_rings_eight_hops():
    """Per unit: 2 gathers (forward, backward) and 1 reduce-scatter over the world's ring, each rank sending
    (N−1)·c_u elements; the sends 3→4 and 7→0 cross nodes: inter = 2·7·c_u·2 B per call, intra = 6·7·c_u·2 B."""
    model, engine = step("full_shard", "fsdp2")
    c = pieces(model, 8, dim0=True)
    calls = 3 * sum(c.values())  # two gathers and one reduce-scatter per unit: Σ c_u each
    assert tier_bytes(engine) == (6 * 7 * calls * 2, 2 * 7 * calls * 2)


def test_hsdp_keeps_gathers_and_reduce_scatters_on_nvlink_and_sends_only_its_all_reduce_across():
    """S = G = 4, R = 2: the gathers and the reduce-scatter run inside each node: N·(S−1)·c_u elements a call, all
    intra-node; the all-reduce over each replicate pair (0 4) (1 5) ... crosses at every hop: S groups · 2 phases ·
    (R−1)·c_u elements."""
    model, engine = step("hsdp", "fsdp2")
    c = sum(pieces(model, 4, dim0=True).values())
    assert tier_bytes(engine) == (3 * 8 * 3 * c * 2, 4 * 2 * 1 * c * 2)


def test_mics_gathers_within_its_shard_group_and_all_reduces_at_the_boundary():
    """S = 4 (a node): as HSDP with DeepSpeed's per-element chunks; K = 2 micro-steps: the gathers and
    reduce-scatters of both, but the replicas' all-reduce once, at the boundary, in the accumulation dtype (fp16)."""
    model, engine = step("mics", "deepspeed-zero3", K=2)
    c = sum(pieces(model, 4, dim0=False).values())
    assert tier_bytes(engine) == (2 * 3 * 8 * 3 * c * 2, 4 * 2 * 1 * c * 2)


def test_hpz_sends_forward_across_nodes_and_backward_within_each():
    """N = 8, S = 4, M = 2: forward gathers over the world's ring (2 of its 8 hops across), backward gathers each
    rank's secondary piece M·c_u within its node ((S−1)·M·c_u elements each rank, all intra-node), reduce-scatter
    over the world."""
    model, engine = step("hpz", "deepspeed-zero3")
    c = sum(pieces(model, 8, dim0=False).values())
    world = 2 * 7 * c  # forward gather + reduce-scatter: every rank sends 7·c_u per call
    assert tier_bytes(engine) == ((6 * world + 8 * 3 * 2 * c) * 2, 2 * world * 2)
    _, flat = step("full_shard", "deepspeed-zero3")
    saved = tier_bytes(flat)[1] - tier_bytes(engine)[1]
    assert saved == 2 * 7 * c * 2  # hpZ saves exactly the backward gather's inter-node bytes


# -- the ledgers at 175B on 4096 ranks (meta backend: one representative rank) -----------------------------
GPT3 = MetaModel.from_preset(get_preset("gpt3-175b"), unit="block")
N, G = 4096, 8


def meta_engine(strategy, S=None):
    cluster = Cluster(N, backend="meta", trace="call", timeline=False, gpus_per_node=G)
    options = {} if S is None else {"shard_group": S}
    recipe = "fsdp2" if strategy == "reshard_to_group" else "deepspeed-zero3"  # FSDP2 cuts dim 0: one row each here
    engine = ZeroEngine(GPT3, cluster, strategy, Adam(), "fp16-mixed", recipe=recipe, **options)
    engine.step(GPT3.batches(cluster, batch=8))
    return engine.cluster.ranks[0].ledger


@pytest.mark.parametrize("strategy", ["hpz", "reshard_to_group"])
def test_the_secondary_pieces_peak_is_2_m_s_bytes(strategy):
    """GPT-3 175B, N = 4096, S = G = 8, M = 512: every unit's piece is live at the end of forward (hpZ keeps them
    until the step, FSDP2 until each unit's backward gather): 2·M·s bytes, s = Σ_u ⌈n_u/N⌉ (one parameter per
    unit in the preset's twin), within padding of 2Ψ/S."""
    ledger = meta_engine(strategy)
    s = sum(math.ceil(count / N) for _, count in GPT3_UNITS)
    assert ledger.peak("secondary") == 2 * (N // 8) * s
    assert 0 <= ledger.peak("secondary") - 2 * GPT3.num_params / 8 <= 2 * (N // 8) * len(GPT3_UNITS)
    assert ledger.current("secondary") == 0  # freed at the step's end (hpZ: invalidate_secondary_tensor)


GPT3_UNITS = [(layer.name, getattr(layer, "count", 0)) for layer in GPT3.layers]


@pytest.mark.parametrize("S", [8, 64, 512])
def test_mics_holds_its_model_states_sharded_over_the_group(S):
    """MiCS with shard groups of S: each rank's resting model states are 16 bytes per element of s_S = Σ ⌈n_u/S⌉
    (fp16 params and grads, fp32 master, Adam m and v), where ZeRO-3 holds 16 per element of Σ ⌈n_u/N⌉."""
    s = sum(math.ceil(count / S) for _, count in GPT3_UNITS)
    ledger = meta_engine("mics", S)
    assert {k: v for k, v in ledger.by_kind().items() if v} == {
        "params": 2 * s, "grads": 2 * s, "master": 4 * s, "optim:m": 4 * s, "optim:v": 4 * s}
    assert abs(16 * s - 16 * GPT3.num_params / S) <= 16 * len(GPT3_UNITS)  # = 16Ψ/S but for the padding
