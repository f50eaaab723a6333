"""Context parallelism in time (issue 60, Build 4's second half): the KV ring's sends overlapped with the blocks of
attention as Transformer Engine overlaps them, each send one hop on its link tier, and each hop of the calibrated
compute model charged for the block its rank computes there — so the zigzag split's balance, and the contiguous
split's imbalance under a causal mask, are on the timeline's own numbers.

A small Llama (GQA, 2 layers) on the meta backend with every rank hosted (each rank's computes in the log), a
calibrated time model (the "eager" preset), H100s on NVLink 4.
"""

import math

import pytest

from zerosim import Cluster, ZeroEngine, get_optimizer
from zerosim.analysis.costs import LINKS, parse_efficiency, unit_work
from zerosim.analysis.timeline import Hardware, TimeModel, simulate
from zerosim.cluster import Call, Compute
from zerosim.models import MetaLlama, read_hf_config
from zerosim.parallel.context import ContextParallel, block_shapes, block_work, busiest_position

SHAPE = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2048, "num_attention_heads": 8,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 512, "max_position_embeddings": 32768,
         "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False}
L, C = 16384, 4
# zigzag's hops, rank against rank, at this shape: equal attention, the copies of 2048 keys more or fewer a hop (of
# 4096 tokens a rank, d_h 128) on top: 1.8 % measured; contiguous: 2.25x
ZIGZAG_SPREAD = 0.02


def twin(L=L):
    return MetaLlama.from_config(read_hf_config(SHAPE, name="small"), seq_len=L, checkpoint="block",
                                 attention="flash")


def step(split="zigzag", style="ring", hosted="all", C=C, N=None, gpus_per_node=None, model=None, L=L):
    """(timeline, cluster, the KernelTimes, the CP parallelism) of one step of CP C on N ranks (default C)."""
    cp = ContextParallel(model or twin(L), cp=C, style=style, split=split)
    cluster = Cluster(N or C, backend="meta", trace="call", timeline=False, hosted=hosted,
                      gpus_per_node=gpus_per_node)
    engine = ZeroEngine(cp.model, cluster, 3, get_optimizer("adam"), "bf16-mixed", parallelisms=(cp,))
    engine.step(cp.model.batches(cluster, 1, L // C))
    hw = Hardware("h100", "nvlink4", "bf16", inter_link="ib_ndr" if gpus_per_node else None)
    costs = TimeModel(parse_efficiency("eager")).costs(cp.model, (1, L // C), hw, cp.position_of(cluster,
                                                                                                engine.dims))
    return simulate(cluster.trace, hw, costs=costs), cluster, costs, cp


def per_rank(result, costs, what):
    """{rank: the hops' compute events summed}: their seconds on the timeline (`what` "interval"), or the FLOPs the
    time model charged them at the attention kernel's rate ("attention")."""
    out = {}
    for r in range(result.world_size):
        for iv in result.track(r, "compute"):
            if ".hop" not in getattr(iv.event, "name", ""):
                continue
            if what == "interval":
                out[r] = out.get(r, 0.0) + iv.end - iv.start
            else:
                w = costs.work(iv.event)
                out[r] = out.get(r, 0.0) + w.attention_fwd + w.attention_bwd
    return out


def events(result, rank) -> list:
    """Rank `rank`'s compute events, in order (the optimizer's steps left out)."""
    return [iv.event for iv in result.track(rank, "compute") if isinstance(iv.event, Compute)]


def intervals(result, rank) -> list:
    return [iv for iv in result.track(rank, "compute") if isinstance(iv.event, Compute)]


def test_zigzag_balances_the_hops_and_a_contiguous_causal_split_does_not():
    zigzag, _, zcosts, _ = step("zigzag")
    contiguous, _, ccosts, _ = step("contiguous")
    z_att, c_att = per_rank(zigzag, zcosts, "attention"), per_rank(contiguous, ccosts, "attention")
    # the attention kernels' work: zigzag gives every rank 2C + 1 half-chunks' rows, the same query-key pairs
    # (_split.py), so the same FLOPs to the bit; contiguously rank p computes its diagonal (½ a chunk's pairs) and p
    # full blocks: (p + ½) chunks' pairs, the last rank 2C − 1 = 7 times the first's
    assert len(set(z_att.values())) == 1
    assert [c_att[p] / c_att[0] for p in range(C)] == [1, 3, 5, 7]
    # the timeline's intervals of the hops, rank by rank: zigzag's differ only by their memory-bound parts (a "below"
    # hop reads half the keys an "above" hop does, so fewer repeat_kv copies, and merges twice the rows: ZIGZAG_SPREAD),
    # the contiguous split's last rank several times its first's
    z, c = per_rank(zigzag, zcosts, "interval"), per_rank(contiguous, ccosts, "interval")
    assert max(z.values()) / min(z.values()) - 1 < ZIGZAG_SPREAD
    assert c[C - 1] / c[0] > 4
    # and the step waits for the slowest rank: contiguous is slower than zigzag by its last rank's extra attention
    assert contiguous.step_time > zigzag.step_time


def test_a_causal_diagonal_block_is_half_the_pairs_and_the_hops_add_up_to_one_cth():
    result, cluster, costs, cp = step("contiguous")
    first, later = (next(e for e in events(result, C - 1) if e.name == f"block0.attn.hop{j}" and e.kind == "forward")
                    for j in (0, 1))
    # both blocks are L_r queries × L_r keys; hop 0's is the diagonal, masked: FlashAttention skips the tiles above it
    assert costs.work(first).attention_fwd * 2 == costs.work(later).attention_fwd
    # every rank's hops together, under zigzag: the unsplit attention's forward work (costs/_kernel_work.py,
    # 4·B·H·L²·d_h / 2 over the whole sequence), divided by C
    z, _, zcosts, zcp = step("zigzag")
    whole = unit_work(twin().gpt.layers[1].attn, (1, L, 1024), "forward").attention_fwd
    for r in range(C):
        hops = [e for e in events(z, r) if e.name.startswith("block0.attn.hop") and e.kind == "forward"]
        assert sum(zcosts.work(e).attention_fwd for e in hops) == whole / C


def test_the_forward_ring_sends_the_next_hops_keys_while_this_hop_computes():
    result, cluster, _, _ = step("zigzag")
    calls = {c.call: c for c in cluster.trace.calls}
    track = intervals(result, 0)
    comm = {iv.event.call: iv for iv in result.track(0, "comm")}
    for j in range(C - 1):
        hop = next(iv for iv in track if iv.event.name == f"block0.attn.hop{j}" and iv.event.kind == "forward")
        nxt = next(iv for iv in track if iv.event.name == f"block0.attn.hop{j + 1}" and iv.event.kind == "forward")
        (sent,) = nxt.event.needs  # hop j+1 waits for one call: the K/V sent while hop j computed
        assert calls[sent].collective == "send_recv" and calls[sent].purpose == "context parallel"
        assert comm[sent].start < hop.end and comm[sent].end > hop.start  # the two overlap in time
        assert sent not in hop.event.needs


def test_the_backward_ring_overlaps_each_hops_message_with_its_attention_backward():
    """Transformer Engine 2.18's backward step i posts [kv, dkv], runs the block's flash backward beside it and waits
    for the message only before adding into the received dK/dV: the next hop (or the QKV end after hop 0) waits."""
    result, cluster, _, _ = step("zigzag")
    calls = {c.call: c for c in cluster.trace.calls}
    track = [iv for iv in intervals(result, 0) if iv.event.kind == "backward"]
    comm = {iv.event.call: iv for iv in result.track(0, "comm")}
    names = [f"block1.attn.hop{j}" for j in range(C - 1, -1, -1)] + ["block1.attn.qkv"]
    units = [next(iv for iv in track if iv.event.name == n) for n in names]
    hidden = 0.0
    for hop, after in zip(units, units[1:]):
        (message,) = [c for c in after.event.needs if calls[c].purpose == "context parallel"]
        assert calls[message].collective == "send_recv" and "backward" in calls[message].tag
        assert message not in hop.event.needs  # the hop did not wait for its own message
        iv = comm[message]
        assert iv.start < hop.end  # it travelled while the hop computed
        hidden += min(iv.end, hop.end) - max(iv.start, hop.start)
    assert hidden > 0.5 * sum(comm[c].end - comm[c].start for u in units[1:] for c in u.event.needs
                              if calls[c].purpose == "context parallel")


def test_a_send_is_one_hop_on_its_link_tier():
    """One send/receive is one step of a ring however large the CP group: base + α + the busiest rank's bytes / β,
    NVLink's within a node, the network's (one NIC a rank) where the CP ring leaves it."""
    for per_node, link in ((None, "nvlink4"), (2, "ib_ndr")):
        result, cluster, _, _ = step("zigzag", N=C, gpus_per_node=per_node)
        call = next(c for c in cluster.trace.calls if c.collective == "send_recv")
        iv = next(iv for iv in result.track(0, "comm") if iv.event.call == call.call)
        B, G, Lr, dh = 1, 2, L // C, 128  # one message: K and V, (B, G, L_r, d_h) bf16 each
        message = 2 * B * G * Lr * dh * 2
        assert call.tier == ("inter-node" if per_node else "intra-node")
        want = LINKS[link].base + LINKS[link].alpha + message / LINKS[link].bandwidth
        assert math.isclose(iv.end - iv.start, want, rel_tol=1e-12)


@pytest.mark.parametrize("style", ["ring", "allgather"])
def test_one_hosted_rank_stands_for_the_slowest_position(style):
    """The meta backend hosts one rank for all N; beside CP it computes the busiest position's blocks. Contiguous,
    that position is the slowest at every hop and the step is the one every rank hosted gives, to the bit. Zigzag,
    no position is (equal pairs, unequal keys and rows): the step differs from every rank's by at most what the other
    ranks' hops took beyond the representative's, hop by hop."""
    every, *_ = step("contiguous", style)
    one, *_ = step("contiguous", style, hosted="representative")
    assert one.step_time == every.step_time
    every, *_ = step("zigzag", style)
    one, *_ = step("zigzag", style, hosted="representative")
    tracks = [intervals(every, r) for r in range(C)]
    beyond = sum(max(max(t[i].end - t[i].start for t in tracks) - (tracks[0][i].end - tracks[0][i].start), 0.0)
                 for i in range(len(tracks[0])))
    assert abs(one.step_time - every.step_time) <= beyond
    assert beyond < 0.01 * every.step_time


@pytest.mark.parametrize("split", ["contiguous", "zigzag"])
@pytest.mark.parametrize("causal", [True, False])
def test_the_busiest_position_computes_the_most_at_every_hop(split, causal):
    for cp in range(1, 9):
        p = busiest_position(split, causal, cp)
        for j in range(cp):
            mine = block_work(block_shapes("ring", split, causal, cp, p, j, 2 * cp))
            assert all(mine >= block_work(block_shapes("ring", split, causal, cp, q, j, 2 * cp)) for q in range(cp))
        assert p == (cp - 1 if split == "contiguous" and causal else 0)


def test_the_allgather_style_exposes_its_gathers():
    """Transformer Engine's AttnFuncWithCPAndKVAllGather gathers K and V (gather_along_first_dim, synchronous)
    before the attention that reads them and reduce-scatters dK, dV after: nothing overlaps them."""
    result, cluster, _, _ = step("zigzag", "allgather")
    by = result.comm_by_purpose(0)["context parallel"]
    # two layers: K, V gathered forward, again in the block's recompute (full checkpointing) and backward, and dK, dV
    # reduce-scattered
    assert by["calls"] == 2 * 2 * 4
    assert math.isclose(by["exposed"], by["seconds"], rel_tol=1e-9)
    kinds = {c.collective for c in cluster.trace.calls if c.purpose == "context parallel"}
    assert kinds == {"all_gather", "reduce_scatter"}
    assert not any(isinstance(e, Call) and e.collective == "send_recv" for e in cluster.trace.log)
    assert any(isinstance(e, Compute) and e.name.endswith("attn.gathered") for e in cluster.trace.log)


def test_the_cp_groups_calls_run_beside_data_parallelisms():
    """The K/V's sends go over the CP group's own NCCL communicator (Transformer Engine's flash_attn_p2p_communicate
    on cp_group), so on a stream of their own: they do not queue behind ZeRO-3's gathers and reduce-scatters."""
    result, cluster, _, _ = step("zigzag")
    comm = result.track(0, "comm")
    cp = [iv for iv in comm if iv.event.purpose == "context parallel"]
    dp = [iv for iv in comm if iv.event.purpose in ("gather params", "reduce grads")]
    assert cp and dp
    assert any(a.start < b.end and b.start < a.end for a in cp for b in dp)
