"""torch's own context parallelism (`--cp-style torch`, parallel/context/_torch_core.py), against torch 2.13.0's
torch/distributed/tensor/experimental/_context_parallel/_attention.py as torchtitan 9dec370 runs it: its merge
(`_SDPAMerger`) against float64 softmax, its sends by hand (one all-gather of every query head's K and V, forward
and again in backward; C fp32 dK, dV sums a backward), its steps in torch's order on the timeline (step 1 waits for
the all-gather; each sum waited for after the next step's attention), its time charges by hand, and what torch
refuses. The engine against its one-device oracle, bit for bit: tests/test_context_oracle.py."""

import math

import numpy as np
import pytest

from zerosim import Cluster, ZeroEngine, get_optimizer
from zerosim.analysis.costs import cp_unit_work
from zerosim.cluster import Compute
from zerosim.models import GPT, Llama
from zerosim.models.layers import flash_attention_forward, merge_sigmoid
from zerosim.parallel.context import ContextParallel, positions, ring_attention, step_of


def softmax_attention(q, k, v, causal=True):
    """Plain attention in float64: the truth every merge order must approach."""
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s[..., np.triu(np.ones(s.shape[-2:], bool), 1)] = -np.inf
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def test_the_merge_of_two_key_blocks_is_the_softmax_over_both():
    """Two blocks of keys, each a flash call in fp32, merged by torch's sigmoid form: within a few fp32 roundings of
    float64 attention over all the keys (each output a convex mix, |O| ≤ max |V| ≈ 3 here: 2⁻²⁰ of that)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 8, 16)) for _ in range(3))
    halves = [flash_attention_forward(q.astype(np.float32), k[..., s, :].astype(np.float32),
                                      v[..., s, :].astype(np.float32), "fp32", 4, False)
              for s in (slice(0, 4), slice(4, 8))]
    out, lse = None, None
    for o_i, (*_, lse_i) in halves:
        out, lse = merge_sigmoid(out, lse, o_i, lse_i, "fp32")
    assert np.abs(out - softmax_attention(q, k, v, causal=False)).max() < 3 * 2.0**-20
    s = q @ np.swapaxes(k, -1, -2) / 4.0
    assert np.abs(lse - np.log(np.exp(s).sum(axis=-1))).max() < 2.0**-18  # the lse: log Σ e^s, |lse| < 8


def test_a_partial_merge_touches_only_its_rows():
    """torch's `partial` (the load-balanced i > p): the second half of the rows merged, the first half as it was."""
    rng = np.random.default_rng(1)
    out, lse = rng.standard_normal((1, 2, 8, 4)).astype(np.float32), rng.standard_normal((1, 2, 8)).astype(np.float32)
    o_i, lse_i = rng.standard_normal((1, 2, 4, 4)).astype(np.float32), rng.standard_normal((1, 2, 4)).astype(np.float32)
    new_out, new_lse = merge_sigmoid(out, lse, o_i, lse_i, "fp32", slice(4, 8))
    assert np.array_equal(new_out[..., :4, :], out[..., :4, :]) and np.array_equal(new_lse[..., :4], lse[..., :4])
    assert not np.array_equal(new_out[..., 4:, :], out[..., 4:, :])
    # the new lse is log(e^lse + e^lse_i), in float64 from the same fp32 inputs
    want = np.logaddexp(lse[..., 4:].astype(np.float64), lse_i.astype(np.float64))
    assert np.abs(new_lse[..., 4:] - want).max() < 2.0**-20


@pytest.mark.parametrize("split", ["zigzag", "contiguous"])
@pytest.mark.parametrize("C", [2, 4])
def test_ring_attention_in_torchs_style_is_attention(C, split):
    """`ring_attention(style="torch")`: every rank's output within fp32's roundings of float64 attention over the
    whole sequence (GQA: 4 query heads over 2 key/value heads)."""
    rng = np.random.default_rng(C)
    L = 8 * C
    q, k, v = rng.standard_normal((1, 4, L, 8)), rng.standard_normal((1, 2, L, 8)), rng.standard_normal((1, 2, L, 8))
    want = softmax_attention(q, np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1))
    where = [positions(L, split, C, c) for c in range(C)]
    cut = [[a[:, :, w].astype(np.float32) for w in where] for a in (q, k, v)]
    out, _ = ring_attention(Cluster(C), *cut, style="torch", split=split, fmt="fp32", block=4)
    for c in range(C):
        assert np.abs(out[c] - want[:, :, where[c]]).max() < 2.0**-19


def llama(checkpoint="none"):
    return Llama(vocab=16, d_model=16, n_heads=4, n_kv_heads=2, head_dim=4, n_layers=2, seq_len=16, d_ff=16,
                 attention="flash", flash_block=3, checkpoint=checkpoint)


def one_step(model, C=2, style="torch", backend="numpy", stage=3):
    cp = ContextParallel(model, cp=C, style=style)
    cluster = Cluster(2 * C, backend=backend, trace="call", gpus_per_node=C)
    engine = ZeroEngine(cp.model, cluster, stage, get_optimizer("adam"), "bf16-mixed", parallelisms=(cp,))
    rng = np.random.default_rng(0)
    engine.step(cp.batches(engine.dims, [(rng.integers(0, 16, (2, 16)),) * 2 for _ in range(2)]))
    return cluster, cp


@pytest.mark.parametrize("checkpoint", ["none", "block"])
@pytest.mark.parametrize("C", [2, 4])
def test_each_layer_sends_what_torch_sends(C, checkpoint):
    """Per layer and micro-batch: one all-gather of torch.cat((k.flatten(), v.flatten())) at every query head (B ·
    H · L_r · d_h each) in each forward pass (the recompute too) and again in backward, and C sends of the fp32 dK, dV
    sums (`_AllToAllRotater`), each to the next rank."""
    cluster, _ = one_step(llama(checkpoint), C)
    calls = [c for c in cluster.trace.calls if c.purpose == "context parallel"]
    B, H, Lr, dh, layers = 2, 4, 16 // C, 4, 2
    passes = 2 if checkpoint == "block" else 1
    gathers = [c for c in calls if c.collective == "all_gather"]
    sums = [c for c in calls if c.collective == "send_recv"]
    assert len(gathers) == layers * (passes + 1) and len(sums) == layers * C and len(calls) == len(gathers) + len(sums)
    sent = cluster.trace.sent_totals(2 * C)
    # bf16 K and V, C − 1 messages of the ring all-gather; fp32 sums, one message a step
    per_rank = layers * (passes + 1) * (C - 1) * 2 * B * H * Lr * dh * 2 + layers * C * 2 * B * H * Lr * dh * 4
    context = {r: 0 for r in range(2 * C)}
    for c in calls:
        for r, nbytes in cluster.trace.sent_by_rank(c.call).items():
            context[r] += nbytes
    assert set(context.values()) == {per_rank}
    assert all(v >= per_rank for v in sent)


def test_backward_runs_torchs_steps_in_forward_order():
    """Unit hop{j}'s backward is step C−1−j: the first backward unit computes step 0, the rank's own causal diagonal
    block (half its pairs), and the all-gather it waits for comes before it."""
    assert [step_of(j, 4, "backward") for j in range(4)] == [3, 2, 1, 0]
    assert [step_of(j, 4, "forward") for j in range(4)] == [0, 1, 2, 3]
    twin_units = ContextParallel(llama(), cp=4, style="torch").model
    hop3 = next(u for u in twin_units.layers if u.name == "block0.attn.hop3")
    cluster, cp = one_step(llama(), C=4)
    forward = cp_unit_work(cp.model, next(u for u in cp.model.layers if u.name == "block0.attn.hop0"), 2, 4,
                           "forward", "eager", False, 0)
    backward = cp_unit_work(cp.model, hop3, 2, 4, "backward", "eager", False, 0)
    assert backward.attention_bwd == 2.5 * forward.attention_fwd  # the same (diagonal) block, backward 2.5x
    log = [e for e in cluster.trace.log if isinstance(e, Compute) and e.rank == 0 and e.kind == "backward"
           and ".attn." in e.name and e.name.startswith("block1.")]
    assert [e.name for e in log] == ["block1.attn.out"] + [f"block1.attn.hop{j}" for j in (3, 2, 1, 0)] + [
        "block1.attn.qkv"]


def test_torchs_time_charges_are_its_blocks_and_its_fp32_bytes():
    """One step of Llama's ring at position 0 of CP 2, zigzag, B = 1, L_r = 8 (two pieces of 4), H = 4, d_h = 4, by
    hand (analysis/costs/_context_work.py's table)."""
    cp = ContextParallel(llama(), cp=2, style="torch")
    hop0, hop1 = (next(u for u in cp.model.layers if u.name == f"block0.attn.hop{j}") for j in (0, 1))
    W, per = 1 * 4 * 8 * 4, 1 * 4 * 4  # the output's elements; elements a row
    f0 = cp_unit_work(cp.model, hop0, 1, 8, "forward", "eager", False, 0)
    # step 0: the 8 × 8 diagonal block, half its pairs: 8·8 − 8²/2 = 32 pairs, 4 FLOPs a pair and head width
    assert f0.attention_fwd == 4 * 1 * 4 * 4 * 32
    # widen 8 rows (6 B), torch.cat of K and V for the all-gather (4 B each), repeat_kv's copies of K and V (G = 2 <
    # H = 4: the H·d_h-wide result read and written in bf16, 4 B an element, at each of the 8 tokens)
    assert f0.memory == 6 * per * 8 + 2 * 4 * W + 2 * 4 * (4 * 4) * 8
    f1 = cp_unit_work(cp.model, hop1, 1, 8, "forward", "eager", False, 0)
    # step 1 at position 0 (1 > p = 0): the second half of Q (4 rows) × both halves of K/V (8 keys), no mask
    assert f1.attention_fwd == 4 * 1 * 4 * 4 * (4 * 8)
    # merge 38 B on 4 rows, the partial step's torch.cat over all 8 rows, 52 B a row for the lse, the last step's
    # rounding to bf16
    assert f1.memory == 38 * per * 4 + 8 * W + 52 * 1 * 4 * 4 + 6 * W
    b1 = cp_unit_work(cp.model, hop0, 1, 8, "backward", "eager", False, 0)  # unit hop0's backward: step 1
    assert b1.attention_bwd == 2.5 * f1.attention_fwd
    # dQ on 4 rows and dK, dV on 8 keys (10 B each), the partial cat, the two sums' cat for the send, the last step's
    # three roundings
    assert b1.memory == 10 * per * (4 + 2 * 8) + 8 * W + 2 * 8 * W + 3 * 6 * W


def test_what_torch_refuses_is_refused():
    """torch 2.13: "Load balancing requires `is_causal=True`" (the head-tail split needs the mask)."""
    model = GPT(vocab=16, d_model=8, n_heads=2, n_layers=1, seq_len=8, attention="flash")
    with pytest.raises(ValueError, match="style 'torch' with split 'zigzag' needs causal attention"):
        ContextParallel(model, cp=2, style="torch", split="zigzag", causal=False)
    with pytest.raises(ValueError, match="needs causal attention"):
        ring_attention(Cluster(2), [np.zeros((1, 1, 2, 2))] * 2, [np.zeros((1, 1, 2, 2))] * 2,
                       [np.zeros((1, 1, 2, 2))] * 2, style="torch", split="zigzag", causal=False)
    ContextParallel(model, cp=2, style="torch", split="contiguous", causal=False)  # without balancing: torch runs it


def test_step_one_waits_for_the_all_gather_and_each_sum_for_the_next_steps_attention():
    """On the timeline (the meta twin, H100s on NVLink 4, the eager preset): forward, the one all-gather is posted
    before step 0 computes and step 1 waits for it; backward, the sum step i sent is waited for by the unit after
    step i + 1 (torch's `next_buffer` after the op), so it travels while step i + 1's attention computes; the last,
    the rank's own, by the QKV end."""
    from test_context_time import C, intervals, step

    result, cluster, _, _ = step("zigzag", "torch")
    calls = {c.call: c for c in cluster.trace.calls}
    track = intervals(result, 0)
    comm = {iv.event.call: iv for iv in result.track(0, "comm")}

    def unit(name, kind):
        return next(iv for iv in track if iv.event.name == name and iv.event.kind == kind)

    hop0, hop1 = unit("block0.attn.hop0", "forward"), unit("block0.attn.hop1", "forward")
    (gather,) = [c for c in hop1.event.needs if calls[c].purpose == "context parallel"]
    assert calls[gather].collective == "all_gather" and gather not in hop0.event.needs
    assert comm[gather].start < hop0.end  # it travelled while step 0 computed
    names = [f"block1.attn.hop{j}" for j in range(C - 1, -1, -1)] + ["block1.attn.qkv"]
    units = [unit(n, "backward") for n in names]
    def sums(iv) -> list:
        return [calls[c].tag.split(":")[0] for c in iv.event.needs if calls[c].collective == "send_recv"]

    assert sums(units[0]) == sums(units[1]) == []  # steps 0 and 1 wait for no sum
    for i in range(1, C - 1):  # the unit after step i waits for the sum step i − 1 (unit hop{C − i}) sent
        (sent,) = [c for c in units[i + 1].event.needs if calls[c].collective == "send_recv"]
        assert calls[sent].tag.startswith(f"block1.attn.hop{C - i}:")
        assert comm[sent].start < units[i].end and comm[sent].end > units[i].start  # beside step i's attention
    assert sums(units[-1]) == ["block1.attn.hop1", "block1.attn.hop0"]  # the QKV end: the last two, the own last


@pytest.mark.slow  # Llama 3 8B's memory at 8,192 tokens over CP 4 on the meta backend, four stages: ~3 s
def test_memory_sends_and_keeps_what_torch_does_by_hand():
    """`zerosim memory --cp-style torch`: the trace's bytes equal the hand's (ZeRO's and torch's K/V at every query
    head, analysis/reports cp_sent) at the stages that gather nothing, each block keeps its K and V at the 32 query
    heads, and the legend says what torch sends."""
    import json
    import subprocess
    import sys

    argv = ["memory", "--model", "llama-3-8b", "--ranks", "8", "--cp", "4", "--cp-style", "torch", "--seq-len",
            "8192", "--batch", "1", "--checkpoint", "block-flash", "--precision", "bf16-mixed"]
    run = [sys.executable, "-m", "zerosim.cli.main"]
    r = json.loads(subprocess.run(run + argv + ["--json"], capture_output=True, text=True, check=True).stdout)
    assert r["context_parallel"]["style"] == "torch"
    for row in r["stages"]:
        if row["stage"] < 3:
            assert row["sent"] == row["sent_formula"], row["stage"]
    assert r["activations"]["per_block"]["attn.out.K"] == 32 * 2048 * 128 * 2  # H heads, L / C tokens, bf16
    text = " ".join(subprocess.run(run + argv, capture_output=True, text=True, check=True).stdout.split())
    assert "torch's own: 2·B·H·L/C·d_h, K and V at every query head" in text
    assert "K and V in attn.out are SDPA's inputs, the rank's own pair at every query head" in text


@pytest.mark.slow  # a plan of Llama 3 8B beside CP 2 and its memory command run as printed: ~2 s
def test_plan_names_the_style_and_its_commands_reproduce_the_top_row():
    """`zerosim plan --cp-style torch`: the legend names the style, and the two printed commands (memory, timeline)
    carry it; the memory command measures the top row's peak."""
    import json
    import subprocess
    import sys

    def zerosim(*argv):
        out = subprocess.run([sys.executable, "-m", "zerosim.cli.main", *argv], capture_output=True, text=True,
                             check=True)
        return out.stdout

    argv = ("plan", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "8192",
            "--global-batch", "8", "--cp", "2", "--cp-style", "torch", "--stages", "3", "--strategies", "flash",
            "--micro-batches", "1")
    assert "CP: the context-parallel degree (torch, zigzag split)" in " ".join(zerosim(*argv).split())
    plan = json.loads(zerosim(*argv, "--json"))
    top, (memory_cmd, timeline_cmd) = plan["fitting"][0], plan["reproduce"]
    assert "--cp-style torch" in memory_cmd and "--cp-style torch" in timeline_cmd
    memory = json.loads(zerosim(*memory_cmd.split()[1:], "--json"))  # (the timeline's: tests/test_context_cli.py)
    assert next(x for x in memory["stages"] if x["stage"] == 3)["peak"] == top["peak"]


def test_the_replay_tells_torchs_merge_by_hand():
    """`zerosim replay --cp 2 --cp-style torch`: GPU 1's query (q = 1) over its own key (score 0, value 1) and GPU 0's
    (score 1, value 1.015625), bf16. By hand in float64: the exact output is (e·1.015625 + 1)/(e + 1) = 1.0114228,
    which lies below bf16's midpoint 1.01171875 between 1.0078125 and 1.015625; torch's fp32 running output is
    1 + σ(1)·2⁻⁶ within an fp32 ulp of it (σ(1) = 1/(1 + e⁻¹) = 0.7310586), and its one rounding gives 1.0078125,
    one pass's answer, where Transformer Engine's ring, storing the first term in bf16, gives 1.015625."""
    from zerosim.replay import cp_replay, narrate_cp

    r = cp_replay("bf16-mixed", "torch")
    e = math.e
    exact = (e * 1.015625 + 1) / (e + 1)
    assert abs(r["sigmoid"] - 1 / (1 + math.exp(-1))) < 2.0**-24
    assert abs(r["running"] - exact) <= 2.0**-23  # one fp32 ulp at 1
    assert r["output"] == r["single_pass"] == [1.0078125] and r["ring_output"] == [1.015625]
    assert r["message"]["collective"] == "all_gather" and r["message"]["bytes"] == 4  # K then V, one bf16 each
    assert "rounded once: bf16(1.01142275) = 1.0078125" in narrate_cp(r)
    with pytest.raises(ValueError, match="the all-gather merges nothing"):
        cp_replay("bf16-mixed", "allgather")
