"""ZeRO++ qgZ: one parameter's gradient reduce-scattered as int4 through two all-to-alls, and LoCo's error feedback.

Letters: n nodes of d GPUs, W = n·d ranks (rank node·d + local), M elements of the gradient (M a multiple of 2W),
G = max(rows, cols, W) quantization groups of M/G, partition p = the elements rank p ends with (M/W of them,
G/W groups). DeepSpeed at edaa722, runtime/comm/coalesced_collectives.py: all_to_all_quant_reduce, on every rank:

    1  swizzle_quant: fp16 -> int4 in G groups, partitions written in the order (p % d)·n + p // d
       (csrc/quantization/swizzled_quantize.cu; precision/quantize/_int_quant.py: swizzle_order)
    2  all-to-all of the int4 bytes and of the fp32 scales within the node (groups local_i)
    3  quantized_reduction (csrc/quantization/quant_reduce.cu: dequant_reduce): for each group, the d peers' values
       dequantized to fp16 and added in fp16, 0 + x_0 + x_1 + ... (reduce::element<Add> on __half2), then
       requantized to int4 (same group size)
    4  all-to-all of those bytes and scales across nodes (groups global_k: the ranks with local index k)
    5  dequantize to fp16; `sum(final_output.chunk(num_nodes)) / num_nodes`: the n node sums added in fp16 (Python's
       sum starts from 0), then divided by n on CUDA (fl16(fl32(x · fl32(1/n))): zero/divide_factors.torch_scalar_div)

NOTE: the result is Σ(all W ranks) / n, not / W: reduce_scatter_coalesced, which it replaces, pre-divides by W
(`tensor_partition_flat_buffer.div_(world_sz)`), and nothing in stage3.py's __avg_scatter_grads divides by d after
qgZ. So a quantized gradient comes out d times the unquantized one (Adam barely notices; SGD would).
DeepSpeed takes this path only for tensors with dim > 1 and M % 2W == 0, and only with num_nodes > 1 (else
reduce_scatter_coalesced). Both kernels read the gradient through a __half*: a bf16 gradient would be reinterpreted
bit for bit, so zerosim refuses it. G must split into W equal partitions (else the kernel leaves groups unwritten),
and a group must be what the kernels load: a multiple of 8 elements, at most 40,960 (check_qgz).

LoCo (`zeropp_loco_param`: err_beta, reset_T; all_to_all_loco_quant_reduce, loco_swizzle_quant,
loco_quantized_reduction): before each quantization the error buffer is added in fp16 (__hadd2), and after it
e' = fl16(β·e + (1 − β)·(x − deq(q(x)))) in fp32 (the new error x − deq exact in fp32). The intra error lives in
the swizzled order (M elements), the inter error in the node sums' order (M/d); between steps each is kept as int8
in the same groups (`quantize(err, groups, 8)`) and dequantized to fp16 at the next call — so LoCo's memory in the
ledger is M + M/d bytes and G + G/d fp32 scales per parameter. One counter for all parameters (`loco_idx`):
when it passes reset_T, the next parameter starts from zero errors and the counter from 0.
NOTE (not confirmable without a GPU): β·e + (1 − β)·r may be contracted into an FMA under --use_fast_math;
zerosim rounds each product.
"""

from __future__ import annotations

from dataclasses import field

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.cluster import Groups
from zerosim.collectives._all_to_all import all_to_all
from zerosim.collectives._staging import Collected
from zerosim.precision.quantize import Quantized, dequantize, quantize, swizzle_order


def qgz_groups(shape, world: int) -> int:
    """G = max(rows, cols, W) (all_to_all_quant_reduce's intra_quant_group)."""
    return max(int(shape[0]), int(shape[1]), world)


def qgz_applies(shape, world: int, nodes: int) -> bool:
    """DeepSpeed's own test: qgZ with more than one node, for tensors with dim > 1 and M % 2W == 0."""
    m = int(np.prod(shape))
    return nodes > 1 and len(shape) > 1 and m % (2 * world) == 0


# What DeepSpeed's qgZ kernels can load (0.19.8, unchanged since 0.19.6; csrc/includes/quantization_utils.h:
# `granularity = 16`, `h_per_load = granularity / sizeof(__half)`). swizzled_quantize.cu: swizzled_quant_kernel reads
# each group 8 fp16 values (16 bytes, `ld.global.v4.u32`, 16-byte aligned) a thread from group·M/G + thread·8, and
# only checks that a load *starts* inside the group; quant_reduce.cu: dequant_reduce reads 4 bytes (8 int4 values)
# a thread the same way. A group of M/G elements that is not a multiple of 8 starts its neighbours off the 16-byte
# grid (CUDA's misaligned-address fault) and lets a load run into the next group (whose values join this group's
# absmax): neither is modelled, so zerosim refuses.
QGZ_ELEMENTS_PER_LOAD = 8
# launch_swizzled_quant_impl: 512 threads at most, each step 2 loads of 8 halves, and kernels instantiated for
# total_unroll 2, 4, 6, 8, 10 only: a group of more than 512·16·5 elements matches no branch and nothing is launched.
QGZ_MAX_GROUP = 512 * 16 * 5


def check_qgz(shape, world: int, nodes: int) -> int:
    """G for this shape, or a ValueError saying why DeepSpeed's kernels cannot do it."""
    if not qgz_applies(shape, world, nodes):
        raise ValueError(f"qgZ takes a 2-D or larger gradient of M % 2W == 0 elements on more than one node; "
                         f"{tuple(shape)} on {world} ranks in {nodes} node(s) falls back to reduce_scatter_coalesced")
    m, g = int(np.prod(shape)), qgz_groups(shape, world)
    if m % g or g % world:
        raise ValueError(f"qgZ's swizzled kernel needs G = {g} groups to split {m} elements evenly and into {world} "
                         "partitions; DeepSpeed would leave some groups unwritten")
    per = m // g
    if per % QGZ_ELEMENTS_PER_LOAD:
        raise ValueError(f"qgZ cannot load {tuple(shape)} on {world} ranks: G = max(rows, cols, W) = {g} gives groups "
                         f"of {per} elements, and DeepSpeed's kernels read a group 16 bytes at a time (8 fp16 values; "
                         "csrc/quantization/swizzled_quantize.cu: swizzled_quant_kernel, quant_reduce.cu: "
                         "dequant_reduce), so a group must hold a multiple of 8 elements")
    if per > QGZ_MAX_GROUP:
        raise ValueError(f"qgZ cannot quantize {tuple(shape)} on {world} ranks: groups of {per} elements, and "
                         f"DeepSpeed's launch_swizzled_quant_impl (csrc/quantization/swizzled_quantize.cu) launches "
                         f"no kernel for groups of more than {QGZ_MAX_GROUP:,} elements")
    return g


@dataclass
class LocoState:
    """LoCo's error feedback across calls: one counter for every parameter, and each parameter's int8 buffers."""

    err_beta: float = 0.8  # zeropp_loco_param's defaults (runtime/zero/config.py)
    reset_T: int = 1024
    idx: int = 0  # the module-global `loco_idx`
    buffers: dict = field(default_factory=dict)  # key -> {rank: (intra Quantized, inter Quantized)}

    def after_step(self, overflow: bool, ratio: float = 1.0) -> None:
        """What DeepSpeed does to the errors once the step's loss scaler has decided (runtime/zero/stage3.py,
        `_loco_err_buf_update`, called by `_overflow_check_and_loss_scale_update` after `_update_scale`; v0.19.5 and
        the 0.19.6 head edaa722 alike): an overflowing step deletes every parameter's `intra_ef_buf` and
        `inter_ef_buf`, so the next qgZ call starts from zero errors and resets `loco_idx` (the inf/NaN its
        reduction folded into them goes with them); a clean step whose scale changed multiplies both buffers'
        scales by ratio = new scale / old (`p.intra_ef_buf[1] *= scale`), as the errors are in scaled-gradient
        units. The ratio is a power of two: the fp32 product is exact."""
        if overflow:
            self.buffers.clear()
        elif ratio != 1.0:
            for per_rank in self.buffers.values():
                for pair in per_rank.values():
                    for q in pair:  # in place: the ledger's rows hold these arrays
                        np.multiply(q.scales, np.float32(ratio), out=q.scales)


def _add16(a, b):
    return (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)  # one fp16 add (__hadd2)


def _loco_update(x16, q: Quantized, err16, beta: np.float32) -> np.ndarray:
    """e' = fl16(β·e + (1 − β)·(x − deq)), each product and the sum rounded in fp32."""
    deq = dequantize(q).astype(np.float32)  # de_params.scale = 1 / params.scale: the receiver's value
    new = x16.astype(np.float32) - deq
    one_minus = np.float32(1) - beta
    return (beta * err16.astype(np.float32) + one_minus * new).astype(np.float16)


def all_to_all_quant_reduce(cluster, grads, shape, gpus_per_node: int, loco: LocoState | None = None,
                            key: str = "", tag: str = "") -> list:
    """qgZ of one parameter: `grads` one (M,) fp16 gradient per local rank; returns each rank's (M/W,) fp16
    partition of Σ/n (module docstring), with `.handle` naming the four all-to-alls."""
    w, d = cluster.world_size, gpus_per_node
    if w % d:
        raise ValueError(f"{w} ranks do not fill nodes of {d}")
    if cluster.gpus_per_node is not None and cluster.gpus_per_node != d:
        raise ValueError(f"qgZ's nodes of {d} GPUs are not the cluster's: it places {cluster.gpus_per_node} ranks "
                         "a node")
    n = w // d
    g = check_qgz(shape, w, n)
    m = int(np.prod(shape))
    for x in grads:
        if x.dtype != np.float16:
            raise TypeError(f"qgZ's kernels read fp16 (a {x.dtype} gradient would be reinterpreted): cast it first")
    per = m // w  # elements of one partition
    order = swizzle_order(w, n, d)
    nodes = Groups.blocks(w, d, "node")  # (0..d-1) (d..2d-1) ...: each node's GPUs
    across = Groups.strided(w, d, "across nodes")  # (k, k+d, k+2d, ...): the k-th GPU of every node
    if not cluster.backend.holds_values:
        return _meta(cluster, m, g, d, nodes, across, loco, tag)
    beta = np.float32(loco.err_beta) if loco is not None else None
    reset = loco is not None and (key not in loco.buffers or loco.idx > loco.reset_T)
    if reset:
        loco.idx = 0
    ranks = [rank.index for rank in cluster.ranks]  # this process's ranks (all W in one process; MPI: its own)
    k = len(ranks)
    kept = None if loco is None or reset else loco.buffers[key]
    # Every local rank's kernels at once: each step works group by group (G groups of M/G per rank, k·G side by
    # side) or element by element, so the ranks' arrays stacked and flattened give each rank's bits (the naive twin,
    # which names partitions and moves nothing, is held equal by tests/test_zeropp.py)
    parts = np.stack([np.asarray(x).reshape(w, per)[order].reshape(-1) for x in grads[:k]])  # (k, M) swizzled
    intra = inter = None  # with LoCo: the error feedback each step adds before it quantizes
    if loco is not None:
        intra = np.zeros((k, m), np.float16) if reset else np.stack([dequantize(kept[r][0]) for r in ranks])
    total, err_in, in_node = _in_node(cluster, parts, intra, beta, k, m, g, d, nodes, tag)
    if loco is not None:
        inter = np.zeros((k, m // d), np.float16) if reset else np.stack([dequantize(kept[r][1]) for r in ranks])
    out, err_out, across_nodes = _across_nodes(cluster, total, inter, beta, k, m, g, d, n, per, across, tag)
    if loco is not None:  # `p.intra_ef_buf = quantize(intra_err, G, 8)`, `p.inter_ef_buf = ...(G / d groups)`
        e_in, e_out = quantize(err_in.reshape(-1), 8, k * g), quantize(err_out.reshape(-1), 8, k * (g // d))
        loco.buffers.setdefault(key, {}).update(
            (r, (_part(e_in, i, k), _part(e_out, i, k))) for i, r in enumerate(ranks))
        loco.idx += 1
    return Collected(out, in_node + across_nodes)


def _in_node(cluster, parts, intra, beta, k: int, m: int, g: int, d: int, nodes, tag: str) -> tuple:
    """Step 1, within each node: the swizzled (k, M) gradients (plus LoCo's `intra` error) quantized to int4, sent
    all-to-all among the node's d GPUs, each rank's d received chunks added in fp16: ((k, M/d) sums, LoCo's new
    error or None, the two all-to-alls' handle)."""
    if intra is not None:
        parts = _add16(parts, intra)
    q = quantize(parts.reshape(-1), 4, k * g)  # (k·M/2,) int4 bytes, (k·G,) scales
    err_in = None if intra is None else _loco_update(parts.reshape(-1), q, intra.reshape(-1), beta).reshape(k, m)
    got_q = all_to_all(cluster, list(q.payload.reshape(k, m // 2)), groups=nodes, tag=f"{tag} (int4, in node)",
                       wire="int4x2")
    got_s = all_to_all(cluster, list(q.scales.reshape(k, g)), groups=nodes, tag=f"{tag} (scales, in node)")
    # each rank received its d peers' chunks side by side (M/d elements, G/d groups each), added in fp16 in order
    received = dequantize(Quantized(np.concatenate(got_q), np.concatenate(got_s), 4, k * m)).reshape(k, d, m // d)
    total = np.zeros((k, m // d), np.float16)
    for j in range(d):
        total = _add16(total, received[:, j])
    return total, err_in, got_q.handle + got_s.handle


def _across_nodes(cluster, total, inter, beta, k: int, m: int, g: int, d: int, n: int, per: int, across,
                  tag: str) -> tuple:
    """Step 2, across nodes: each node's sums (plus LoCo's `inter` error) quantized again, sent all-to-all among the
    n GPUs of the same place on every node, the n nodes' parts summed: (each rank's (M/W,) partition of Σ/n, LoCo's
    new error or None, the two all-to-alls' handle)."""
    if inter is not None:
        total = _add16(total, inter)
    q = quantize(total.reshape(-1), 4, k * (g // d))
    err_out = None if inter is None else _loco_update(total.reshape(-1), q, inter.reshape(-1), beta).reshape(k, m // d)
    fin_q = all_to_all(cluster, list(q.payload.reshape(k, m // (2 * d))), groups=across,
                       tag=f"{tag} (int4, across nodes)", wire="int4x2")
    fin_s = all_to_all(cluster, list(q.scales.reshape(k, g // d)), groups=across,
                       tag=f"{tag} (scales, across nodes)")
    final = dequantize(Quantized(np.concatenate(fin_q), np.concatenate(fin_s), 4, k * per * n)).reshape(k, n, per)
    return list(_sum_nodes_each(final, n)), err_out, fin_q.handle + fin_s.handle


def _part(q: Quantized, i: int, parts: int) -> Quantized:
    """Part i of `parts` equal parts of a quantized buffer (its own payload and scales: `after_step` scales them in
    place, rank by rank)."""
    payload, scales = q.payload.reshape(parts, -1)[i].copy(), q.scales.reshape(parts, -1)[i].copy()
    return Quantized(payload, scales, q.bits, q.numel // parts)


def _sum_nodes_each(chunks: np.ndarray, n: int) -> np.ndarray:
    """`_sum_nodes` for every rank at once: chunks (k, n, M/W) -> (k, M/W), the n node sums added in fp16 in order."""
    acc = np.zeros((chunks.shape[0], chunks.shape[2]), np.float16)
    for i in range(n):
        acc = _add16(acc, chunks[:, i])
    return _div_cuda(acc, n)


def _meta(cluster, m: int, g: int, d: int, nodes, across, loco, tag: str) -> list:
    """The meta backend (no values): the same four all-to-alls with data-less payloads of the same sizes — (M/2,)
    int4 bytes and (G,) fp32 scales in the node, (M/2d,) and (G/d,) across nodes — and (M/W,) fp16 results."""
    if loco is not None:
        raise ValueError("LoCo's error feedback needs values: run qgZ with loco on a cluster that holds them")
    b = cluster.backend
    got_q = all_to_all(cluster, [b.empty((m // 2,), np.uint8) for _ in cluster.ranks], groups=nodes,
                       tag=f"{tag} (int4, in node)", wire="int4x2")
    got_s = all_to_all(cluster, [b.empty((g,), np.float32) for _ in cluster.ranks], groups=nodes,
                       tag=f"{tag} (scales, in node)")
    fin_q = all_to_all(cluster, [b.empty((m // (2 * d),), np.uint8) for _ in cluster.ranks], groups=across,
                       tag=f"{tag} (int4, across nodes)", wire="int4x2")
    fin_s = all_to_all(cluster, [b.empty((g // d,), np.float32) for _ in cluster.ranks], groups=across,
                       tag=f"{tag} (scales, across nodes)")
    out = [b.empty((m // cluster.world_size,), np.float16) for _ in cluster.ranks]
    return Collected(out, got_q.handle + got_s.handle + fin_q.handle + fin_s.handle)


def _sum_nodes(chunks: np.ndarray, n: int) -> np.ndarray:
    """`sum(list(final_output.chunk(num_nodes))) / num_nodes` in fp16 (0 + c_0 turns -0 into +0)."""
    acc = np.zeros(chunks.shape[1], np.float16)
    for c in chunks:
        acc = _add16(acc, c)
    return _div_cuda(acc, n)


def _div_cuda(x16: np.ndarray, n: int) -> np.ndarray:
    """`x / n` for a Python int on CUDA: x · (fl32(1) / fl32(n)) in fp32, rounded to fp16 (div_true_kernel_cuda's
    reciprocal multiply; zero/divide_factors.torch_scalar_div is its twin one layer up, and a test holds them equal)."""
    inv = np.float32(1) / np.float32(n)
    return (x16.astype(np.float32) * inv).astype(np.float16)


def naive_all_to_all_quant_reduce(grads, shape, gpus_per_node: int, loco: LocoState | None = None,
                                  key: str = "") -> list:
    """Naive twin: for each destination partition p, each node's d quantized pieces of p dequantized and added in
    fp16 here, requantized, then the n node sums dequantized, added and divided by n. No swizzle and no all-to-all:
    partitions are named, not moved. With LoCo, the errors are kept per (rank, partition) in `loco.buffers[key]`
    (a layout of its own: hand the twin a LocoState of its own): every group lies inside one partition, so
    quantizing a partition's error alone gives the same int8 as the collective's whole buffer."""
    w, d = len(grads), gpus_per_node
    n = w // d
    g = check_qgz(shape, w, n)
    m = int(np.prod(shape))
    per, gp = m // w, g // w
    beta = np.float32(loco.err_beta) if loco is not None else None
    reset = loco is not None and (key not in loco.buffers or loco.idx > loco.reset_T)
    if reset:
        loco.idx = 0
    kept = {} if loco is None else loco.buffers.setdefault(key, {})
    new = {}

    def send(x16, err_key):  # one quantization, with LoCo's error added first and updated after
        if loco is None:
            return dequantize(quantize(x16, 4, gp))
        err = np.zeros(per, np.float16) if reset else dequantize(kept[err_key])
        x16 = _add16(x16, err)
        q = quantize(x16, 4, gp)
        new[err_key] = quantize(_loco_update(x16, q, err, beta), 8, gp)
        return dequantize(q)

    out = []
    for p in range(w):  # partition p: rank p's result; it is summed by local rank p % d of each node
        node_sums = []
        for i in range(n):
            acc = np.zeros(per, np.float16)
            for j in range(d):
                piece = np.asarray(grads[i * d + j])[p * per : (p + 1) * per]
                acc = _add16(acc, send(piece, ("intra", i * d + j, p)))
            node_sums.append(send(acc, ("inter", i * d + p % d, p)))
        out.append(_sum_nodes(np.stack(node_sums), n))
    if loco is not None:
        kept.update(new)
        loco.idx += 1
    return out
