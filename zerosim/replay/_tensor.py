"""Seed 004's first layer as a 2-way row-parallel linear: one tensor-parallel layer told number by number.

Seed 004's network is h = w1·x1 + w2·x2, a = ReLU(h), y = w3·a + w4. Here its first layer is Megatron's
RowParallelLinear over two GPUs (core_v0.19.0, megatron/core/tensor_parallel/layers.py): GPU 0 holds w1 and x1's
column, GPU 1 holds w2 and x2's; each computes its partial product, and `g` (mappings.py,
reduce_from_tensor_model_parallel_region) all-reduces them on the ring. ReLU and the second layer are replicated:
both GPUs compute them on the same h. Backward, g passes dh on unchanged, each GPU makes the gradient of the weight it
holds, and `f` (copy_to_tensor_model_parallel_region) all-reduces the input's gradient (what a column-parallel layer
before it would need). Both GPUs train on one micro-batch of seed 004's two samples (a TP group sees one micro-batch):
its gradient is the average seed 004's two GPUs reach by a reduce-scatter, here reached by one TP group, each
weight's on the GPU that holds it.

Every product is the TP units' GEMM (models/layers tokens_linear_forward / _backward: fp32 sums, one rounding), every
sum the TP collectives' ring over the mesh's TP group (parallel/tensor/_communication.py) with the values its hops
carried, read from the trace: nothing is typed in. `tensor_replay()` returns plain data; `narrate_tensor()` tells it.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import Cluster
from zerosim.models.layers import relu_forward, tokens_linear_backward, tokens_linear_forward
from zerosim.models.mlp import TinyNet
from zerosim.parallel import ParallelDims
from zerosim.parallel.tensor import run_side
from zerosim.precision import cast, get_precision


def _f(x) -> list:
    return np.asarray(x).astype(np.float64).reshape(-1).tolist()


def _hops(trace, since: int) -> list:
    """[(call, collective phase, step, src, dst, chunk, values)] of every hop of the calls from number `since`."""
    phase = {c.call: "reduce-scatter" if c.op != "gather" else "all-gather" for c in trace.calls}
    return [(e.call, phase[e.call], e.step, e.src, e.dst, e.chunk, _f(e.values) if e.values is not None else [])
            for e in trace.events if e.call >= since]


def tensor_replay(precision: str = "fp16-mixed") -> dict:
    """One forward and backward of seed 004's network with its first layer row-parallel over 2 GPUs (module
    docstring); every number the narration tells (JSON-ready)."""
    fmt = get_precision(precision).compute_format
    w = cast(np.array(TinyNet.WEIGHTS, np.float64), fmt)  # [w1, w2, w3, w4]
    batches = TinyNet.seed_batches()  # both samples, one micro-batch: x (2, 2), t (2,)
    x = cast(np.concatenate([b[0] for b in batches]).astype(np.float64), fmt)
    t = np.concatenate([b[1] for b in batches]).astype(np.float64).reshape(-1)
    cluster = Cluster(2, gpus_per_node=2, keep_values=True)
    group = ParallelDims(2, tp=2).groups("tp")
    # forward: each GPU its column of x and of W = [w1, w2]
    partial = [tokens_linear_forward(x[:, r:r + 1], w[r:r + 1].reshape(1, 1), None, fmt) for r in range(2)]
    first = len(cluster.trace.calls)
    h, _ = run_side("all-reduce", cluster, group, [p.reshape(1, 2, 1) for p in partial], "layer1 g")
    forward_hops = _hops(cluster.trace, first)
    h = h[0].reshape(2, 1)
    a, _ = relu_forward(h, fmt)
    y = tokens_linear_forward(a, w[2:3].reshape(1, 1), w[3:4], fmt)
    acc = np.float64
    losses = 0.5 * (y.astype(acc)[:, 0] - t) ** 2
    # backward: dL/dy = (y - t) / B (seed 004's half-MSE, the mean over the micro-batch), layer 2, layer 1's halves
    dy = cast((y.astype(acc) - t[:, None]) / len(t), fmt)
    da, dw3, db4 = tokens_linear_backward(dy, a, w[2:3].reshape(1, 1), fmt)
    dh = cast(np.where(h.astype(acc) > 0, da.astype(acc), 0.0), fmt)
    halves = [tokens_linear_backward(dh, x[:, r:r + 1], w[r:r + 1].reshape(1, 1), fmt) for r in range(2)]
    first = len(cluster.trace.calls)
    placed = [np.concatenate([halves[r][0] if c == r else np.zeros((2, 1), fmt.dtype) for c in range(2)],
                             axis=1).reshape(1, 2, 2) for r in range(2)]
    dx, _ = run_side("all-reduce", cluster, group, placed, "layer1 f backward")
    return {
        "precision": precision, "compute": fmt.name, "weights": _f(w), "x": [_f(row) for row in x], "t": _f(t),
        "partials": [_f(p) for p in partial], "forward_hops": forward_hops, "h": _f(h), "a": _f(a), "y": _f(y),
        "losses": _f(losses), "loss": float(np.mean(losses)), "dy": _f(dy), "dw3": _f(dw3)[0], "db4": _f(db4)[0],
        "dh": _f(dh), "dw": [_f(halves[r][1])[0] for r in range(2)],
        "dx_partials": [_f(halves[r][0]) for r in range(2)], "dx": [_f(row) for row in dx[0].reshape(2, 2)],
        "backward_hops": _hops(cluster.trace, first),
    }


def _vec(v) -> str:
    return "[" + ", ".join(f"{x:g}" for x in v) + "]"


def _hop_lines(hops: list) -> list:
    return [f"    {phase:14s} step {step}: GPU {a} -> GPU {b}, chunk {c} (sample {c}'s), carrying {_vec(vals)}"
            for _, phase, step, a, b, c, vals in hops if vals]


def narrate_tensor(r: dict) -> str:
    """The replay as text, in the order a GPU does it."""
    w, x, g = r["weights"], r["x"], (lambda v: f"{v:g}")
    lines = [
        f"zerosim replay --tp 2: seed 004's first layer as a 2-way row-parallel linear (Megatron's RowParallelLinear), "
        f"{r['compute']}",
        "",
        "Setup",
        "  model: h = w1*x1 + w2*x2, a = ReLU(h), y = w3*a + w4, loss = 0.5*(y - t)^2, the mean over the micro-batch",
        f"  GPU 0 holds w1 = {g(w[0])}, GPU 1 holds w2 = {g(w[1])}: layer 1's weight cut by its input columns",
        f"  both hold w3 = {g(w[2])}, w4 = {g(w[3])}: ReLU and layer 2 are replicated",
        f"  both train on one micro-batch of seed 004's two samples: x = [{', '.join(_vec(row) for row in x)}], "
        f"t = {_vec(r['t'])}",
        "  (a TP group sees one micro-batch; in seed 004 each sample went to its own GPU)",
        "",
        "Forward",
        "  f (copy_to_tensor_model_parallel_region): both GPUs hold x whole; nothing moves",
        f"  GPU 0 partials w1*x1 = {_vec(r['partials'][0])}   GPU 1 partials w2*x2 = {_vec(r['partials'][1])}",
        "  g (reduce_from_tensor_model_parallel_region): all-reduce on the ring, from the trace (chunk c's sum starts",
        "  at GPU c + 1 and ends at GPU c, then the all-gather hands it round):",
        *_hop_lines(r["forward_hops"]),
        f"  both GPUs: h = {_vec(r['h'])} (seed 004's two h), a = ReLU(h) = {_vec(r['a'])}, "
        f"y = w3*a + w4 = {_vec(r['y'])}",
        f"  loss = mean of {_vec(r['losses'])} = {r['loss']:g}",
        "",
        "Backward",
        f"  dy = (y - t)/2 = {_vec(r['dy'])}; layer 2 on both GPUs: dw3 = {g(r['dw3'])}, dw4 = {g(r['db4'])}",
        f"  dh = {_vec(r['dh'])} on both GPUs: g's backward passes it on, nothing moves",
        f"  GPU 0: dw1 = Σ dh*x1 = {g(r['dw'][0])}   GPU 1: dw2 = Σ dh*x2 = {g(r['dw'][1])}  "
        "(each GPU the gradient of the weight it holds)",
        "  f's backward: the input's gradient dh*w_r, each GPU's column, all-reduced:",
        *_hop_lines(r["backward_hops"]),
        f"  both GPUs: dx = [{', '.join(_vec(row) for row in r['dx'])}] (what a column-parallel layer before this "
        "one would need)",
        "",
        f"The gradient [w1, w2, w3, w4] = [{g(r['dw'][0])}, {g(r['dw'][1])}, {g(r['dw3'])}, {g(r['db4'])}] is seed "
        "004's averaged gradient: its two GPUs reach it",
        "by a reduce-scatter of two samples' gradients; one TP group reaches it on one micro-batch of both, each of w1",
        "and w2 on the GPU that holds it, and the sums layer 1 needs cross the ring. ZeRO beside it shards each GPU's",
        "slice over the data-parallel GPUs that hold the same slice (docs/tensor-parallelism.md).",
    ]
    return "\n".join(lines)
