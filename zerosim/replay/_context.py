"""One hop of ring attention told number by number: two GPUs, one token each, the second one's query merging what
its own key gave with what arrives from the first, in the compute format's roundings.

A causal sequence of two tokens is cut contiguously over a CP group of 2 (parallel/context/_split.py): GPU 0 holds
token 0, GPU 1 token 1; one head, d_h = 1 and q = 1, so each score is the key itself. Ring attention
(parallel/context `ring_attention`, Transformer Engine 2.18's AttnFuncWithCPAndKVP2P.forward): at hop 0 every GPU
attends to its own key (causal: a token sees itself), and sends its K and V on to the next GPU (one message, K then
V: `flash_attn_p2p_communicate`); at hop 1 GPU 1 attends to GPU 0's key, which arrived, while GPU 0 skips what
arrives (GPU 1's token lies in its future: torch's SKIP). GPU 1 then merges its two steps' log-sum-exps in fp32,
lse = max + log1p(exp(min − max)) (`flash_attn_fwd_softmax_lse_correction`), and corrects each step's output by
e^(lse_i − lse), adding in the compute format (`flash_attn_fwd_out_correction`; models/layers/_attention_merge.py).

`style="torch"` tells the same hop as torch's own context parallelism runs it (parallel/context/_torch_core.py: torch
2.13.0's `_templated_ring_attention`): the K and V all-gathered at step 0, each step's output widened to fp32 and
merged as out − sigmoid(lse_1 − lse)·(out − out_1), the output rounded to the compute format once, after the last step
(`_SDPAMerger`; models/layers `merge_sigmoid`).

Every number is the run's: the message's values from the trace (`Cluster(keep_values=True)`), each hop's (out_i,
lse_i) and the merged lse from the ring's own records (`ring_attention(watch=...)`), the output from its return. The
weights e^(lse_i − lse) and the first corrected term are recomputed with the same kernels (models/layers
`correct_out`), and the replay checks that the two corrections give the run's output to the bit. Beside it: one
pass of flash attention over both keys (models/layers `flash_attention_forward`) and float64.
`cp_replay()` returns plain data; `narrate_cp()` tells it.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import Cluster
from zerosim.models.layers import correct_out, flash_attention_forward, merge_sigmoid
from zerosim.parallel.context import ring_attention
from zerosim.precision import cast, get_precision
from zerosim.precision.arithmetic import arithmetic_of

KEYS = (1.0, 0.0)  # token 0's key (GPU 0), token 1's (GPU 1): with q = 1, the scores
VALUES = (1.015625, 1.0)  # their values: 1 + 2⁻⁶ and 1, two neighbours apart in bf16
CP_STYLES = ("ring", "torch")  # the styles that merge (parallel/context STYLES but the all-gather)


def _f(x) -> list:
    return np.asarray(x).astype(np.float64).reshape(-1).tolist()


def cp_replay(precision: str = "bf16-mixed", style: str = "ring") -> dict:
    """One forward of ring attention over two GPUs (module docstring), `style` "ring" (Transformer Engine's) or
    "torch" (torch's own); every number the narration tells (JSON-ready)."""
    if style not in CP_STYLES:
        raise ValueError(f"the replay tells one merge of the ring's styles {CP_STYLES}, got {style!r} (the all-gather "
                         "merges nothing: each query attends to every gathered key in one call)")
    if style == "torch":
        return _torch_replay(precision)
    fmt = get_precision(precision).compute_format
    q, k, v = _inputs(fmt)
    cluster, seen = Cluster(2, keep_values=True), {}
    o, lse = ring_attention(cluster, [q[:, :, :1], q[:, :, 1:]], [k[:, :, :1], k[:, :, 1:]],
                            [v[:, :, :1], v[:, :, 1:]], split="contiguous", fmt=fmt,
                            watch=lambda j, states: seen.__setitem__(j, states))
    mine = seen[1][1]  # GPU 1 after the last hop: its steps and the merged lse
    (out0, lse0, _), (out1, lse1, _) = mine.steps
    sent = next(e for e in cluster.trace.events if e.src == 0 and e.dst == 1)
    ops, acc = arithmetic_of(fmt), mine.lse.dtype
    gap = ops.exp(np.asarray(np.minimum(lse0, lse1) - np.maximum(lse0, lse1), acc))  # what log1p takes, in acc
    w = [ops.exp(np.asarray(x - mine.lse, acc)) for x in (lse0, lse1)]  # e^(lse_i − lse), as correct_out makes them
    first = correct_out(None, out0, mine.lse, lse0, fmt)
    again = correct_out(first, out1, mine.lse, lse1, fmt)
    if not np.array_equal(again, o[1]):  # the narration's steps are the run's arithmetic
        raise AssertionError("the recomputed correction must give the ring's output")
    return {
        "style": "ring", "precision": precision, "compute": fmt.name, "keys": list(KEYS), "values": _f(v),
        "message": _message(sent), **_beside(q, k, v, fmt),
        "gpu0": {"out": _f(o[0]), "lse": _f(lse[0]), "hops": len(seen[1][0].steps)},
        "hops": [{"hop": 0, "key": KEYS[1], "value": VALUES[1], "out": _f(out0), "lse": _f(lse0)},
                 {"hop": 1, "key": KEYS[0], "value": VALUES[0], "out": _f(out1), "lse": _f(lse1)}],
        "lse": _f(mine.lse), "weights": [_f(x)[0] for x in w], "log1p_arg": _f(gap)[0],
        "first_product": _f(out0.astype(acc) * w[0]), "first_term": _f(first),
        "sum": _f(first.astype(acc) + out1.astype(acc) * w[1]), "output": _f(o[1]),
    }


def _inputs(fmt) -> tuple:
    """q, K, V (B, H, L, d_h) = (1, 1, 2, 1) in fmt: q = 1 on both tokens, the keys and values of KEYS and VALUES."""
    q = cast(np.ones((1, 1, 2, 1)), fmt)
    k, v = (cast(np.array(x, np.float64).reshape(1, 1, 2, 1), fmt) for x in (KEYS, VALUES))
    return q, k, v


def _message(sent) -> dict:
    """GPU 0's message to GPU 1, as the trace holds it."""
    return {"src": sent.src, "dst": sent.dst, "values": _f(sent.values), "bytes": sent.bytes, "tag": sent.tag,
            "collective": sent.collective}


def _beside(q, k, v, fmt) -> dict:
    """What a merge is told beside: one pass of flash attention over both keys, float64 and its nearest in fmt."""
    whole, _ = flash_attention_forward(q, k, v, fmt)
    s = np.array(KEYS)
    exact = float(np.exp(s) @ np.array(VALUES) / np.exp(s).sum())
    return {"single_pass": _f(whole[0, 0, 1]), "exact": exact, "nearest": _f(cast(np.array([exact]), fmt))}


def _torch_replay(precision: str) -> dict:
    """The hop as torch's own runs it (module docstring): the run's output, its all-gather from the trace, each step
    and the merge recomputed with the same kernels (and checked to give the run's output to the bit)."""
    fmt = get_precision(precision).compute_format
    q, k, v = _inputs(fmt)
    cluster = Cluster(2, keep_values=True)
    o, lse = ring_attention(cluster, [q[:, :, :1], q[:, :, 1:]], [k[:, :, :1], k[:, :, 1:]],
                            [v[:, :, :1], v[:, :, 1:]], style="torch", split="contiguous", fmt=fmt)
    sent = next(e for e in cluster.trace.events if e.src == 0 and e.dst == 1)
    steps = [flash_attention_forward(q[:, :, 1:], k[:, :, i:i + 1], v[:, :, i:i + 1], fmt, causal=False)
             for i in (1, 0)]  # GPU 1's step 0 (its own key) and step 1 (GPU 0's)
    (out0, (*_, lse0)), (out1, (*_, lse1)) = steps
    acc, ops = lse0.dtype, arithmetic_of(fmt)
    first, _ = merge_sigmoid(None, None, out0, lse0, fmt)
    merged, merged_lse = merge_sigmoid(first, lse0, out1, lse1, fmt)
    if not (np.array_equal(cast(merged, fmt), o[1]) and np.array_equal(merged_lse, lse[1])):
        raise AssertionError("the recomputed merge must give torch's ring's output")
    one = acc.type(1)
    sigma = one / (one + ops.exp(-(lse1 - lse0)))  # sigmoid(lse_1 − lse), as merge_sigmoid forms it
    return {
        "style": "torch", "precision": precision, "compute": fmt.name, "keys": list(KEYS), "values": _f(v),
        "message": _message(sent), **_beside(q, k, v, fmt),
        "gpu0": {"out": _f(o[0]), "lse": _f(lse[0])},
        "hops": [{"hop": 0, "key": KEYS[1], "value": VALUES[1], "out": _f(out0), "lse": _f(lse0)},
                 {"hop": 1, "key": KEYS[0], "value": VALUES[0], "out": _f(out1), "lse": _f(lse1)}],
        "sigmoid": _f(sigma)[0], "difference": _f(first - out1.astype(acc))[0], "running": _f(merged)[0],
        "lse": _f(lse[1]), "output": _f(o[1]), "ring_output": cp_replay(precision)["output"],
    }


def narrate_cp(r: dict) -> str:
    """The replay as text, in the order GPU 1 does it."""
    if r["style"] == "torch":
        return _narrate_torch(r)
    g = (lambda x: f"{x:.9g}")
    (h0, h1), fmt = r["hops"], r["compute"]
    m = r["message"]
    same = r["output"] == r["single_pass"]
    lines = [
        f"zerosim replay --cp 2: one hop of ring attention's online-softmax merge, two GPUs, {fmt}",
        "",
        "Setup",
        "  a causal sequence of 2 tokens cut over a CP group of 2 (contiguous): GPU 0 holds token 0, GPU 1 token 1",
        f"  one head, d_h = 1, q = 1 on both, so each score is the key: keys {r['keys']}, values "
        f"{[g(x) for x in r['values']]} ({fmt})",
        "  GPU 1's query sees both tokens; GPU 0's only its own",
        "",
        "Hop 0 (each GPU its own key and value; the K/V sent on to the next GPU meanwhile)",
        f"  GPU 1: score {g(h0['key'])} -> out_0 = {g(h0['out'][0])} ({fmt}), lse_0 = {g(h0['lse'][0])} (fp32)",
        f"  send: GPU {m['src']} -> GPU {m['dst']}, one message of K then V, {m['bytes']} bytes: "
        f"{[g(x) for x in m['values']]}  (from the trace)",
        "",
        "Hop 1 (the key that arrived)",
        f"  GPU 1: score {g(h1['key'])} -> out_1 = {g(h1['out'][0])}, lse_1 = {g(h1['lse'][0])}",
        f"  GPU 0: skipped (GPU 1's token lies in its future); its output stays {g(r['gpu0']['out'][0])}",
        "",
        "Merge on GPU 1 (fp32 statistics, outputs in the compute format)",
        f"  lse = max(lse_0, lse_1) + log1p(exp(min − max)) = {g(max(h0['lse'][0], h1['lse'][0]))} + "
        f"log1p({g(r['log1p_arg'])}) = {g(r['lse'][0])}",
        f"  weights e^(lse_i − lse): w_0 = {g(r['weights'][0])}, w_1 = {g(r['weights'][1])} (fp32)",
        f"  out = {fmt}(out_0 · w_0) = {fmt}({g(r['first_product'][0])}) = {g(r['first_term'][0])}",
        f"  out = {fmt}(out + out_1 · w_1) = {fmt}({g(r['sum'][0])}) = {g(r['output'][0])}",
        "",
        f"One pass of flash attention over both keys: {g(r['single_pass'][0])}; float64: {g(r['exact'])} (nearest "
        f"{fmt}: {g(r['nearest'][0])})",
        *(["The ring's two roundings (the first term, then the sum) land on the same bits as one pass here."]
          if same else [
              f"The ring rounded twice (the first term to {fmt} before the second was added) and lands "
              f"{g(abs(r['output'][0] - r['single_pass'][0]))} away",
              "from the single pass, which rounds once at the end."]),
        "(models/layers/_attention_merge.py; tests/test_context_merge.py holds a table of such rows by hand)",
    ]
    return "\n".join(lines)


def _narrate_torch(r: dict) -> str:
    g = (lambda x: f"{x:.9g}")
    (h0, h1), fmt, m = r["hops"], r["compute"], r["message"]
    lines = [
        f"zerosim replay --cp 2 --cp-style torch: one merge of torch's own context parallelism, two GPUs, {fmt}",
        "",
        "Setup",
        "  a causal sequence of 2 tokens cut over a CP group of 2 (contiguous): GPU 0 holds token 0, GPU 1 token 1",
        f"  one head, d_h = 1, q = 1 on both, so each score is the key: keys {r['keys']}, values "
        f"{[g(x) for x in r['values']]} ({fmt})",
        "",
        "Step 0 (each GPU its own key; every GPU's K and V all-gathered meanwhile, one message each)",
        f"  GPU 1: score {g(h0['key'])} -> out_0 = {g(h0['out'][0])} ({fmt}), lse_0 = {g(h0['lse'][0])} (fp32)",
        f"  all-gather: GPU {m['src']} -> GPU {m['dst']}, torch.cat of K and V, {m['bytes']} bytes: "
        f"{[g(x) for x in m['values']]}  (from the trace)",
        f"  the running output widened to fp32: out = {g(h0['out'][0])}",
        "",
        "Step 1 (GPU 0's key and value, from the all-gather)",
        f"  GPU 1: score {g(h1['key'])} -> out_1 = {g(h1['out'][0])}, lse_1 = {g(h1['lse'][0])}",
        f"  GPU 0: skipped (GPU 1's token lies in its future); its output stays {g(r['gpu0']['out'][0])}",
        "",
        "Merge on GPU 1 (torch's _SDPAMerger: every number fp32)",
        f"  sigmoid(lse_1 − lse_0) = {g(r['sigmoid'])}",
        f"  out = out − sigmoid · (out − out_1) = {g(h0['out'][0])} − {g(r['sigmoid'])} · ({g(r['difference'])}) "
        f"= {g(r['running'])}",
        f"  lse = lse_0 − logsigmoid(lse_0 − lse_1) = {g(r['lse'][0])}",
        f"  after the last step, rounded once: {fmt}({g(r['running'])}) = {g(r['output'][0])}",
        "",
        f"One pass of flash attention over both keys: {g(r['single_pass'][0])}; float64: {g(r['exact'])} (nearest "
        f"{fmt}: {g(r['nearest'][0])})",
        f"Transformer Engine's ring, which stores its running output in {fmt} (zerosim replay --cp 2): "
        f"{g(r['ring_output'][0])}",
        ("torch's fp32 running output rounds once, as one pass does: the same bits here." if r["output"] ==
         r["single_pass"] else "torch's fp32 running output rounds once, and lands "
         f"{g(abs(r['output'][0] - r['single_pass'][0]))} from one pass (each step's block came out in {fmt})."),
        "(models/layers/_attention_merge.py merge_sigmoid; torch 2.13.0, _context_parallel/_attention.py)",
    ]
    return "\n".join(lines)
