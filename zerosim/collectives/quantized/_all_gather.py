"""Quantized all-gathers: fewer bits on the wire, the integers (or fp8) and their scales both in the trace.

Letters: N ranks, m_r the elements rank r contributes (an all-gather-v: uneven and empty pieces allowed), G_r its
groups (or blocks). Each function quantizes every rank's piece, all-gathers the payload and the scales as two
calls (as DeepSpeed issues two `_dist_allgather_fn`: runtime/zero/partition_parameters.py, _all_gather_coalesced),
and dequantizes on every receiver. Returns one array per local rank (the gathered values, in `out_format`) with
`.handle` naming both calls.

    qwz_all_gather    DeepSpeed ZeRO++ qwZ: fp16 -> symmetric int8 in groups (precision/quantize/_int_quant.py), fp32
                      scales; the receiver's fp16, then `.to(param dtype)` (AllGatherCoalescedHandle.wait)
    fp8_all_gather    torchao's fp8 all-gather for FSDP2 (float8/fsdp_utils.py): every rank casts its piece with the
                      one scale all ranks agreed on (`fp8_amax_all_reduce`: one MAX all-reduce of the amaxes,
                      precompute_float8_dynamic_scale_for_fsdp), e4m3 on the wire, no scale sent
    mxfp8_all_gather  MXFP8 pieces: e4m3 in blocks of 32 and one E8M0 byte a block (precision/quantize/_fp8_blocks.py)

On the meta backend (no values) the same calls and bytes are recorded and the results are data-less arrays.
The naive twins (`naive_qwz_all_gather`, ...) quantize each piece in one place and join the results.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.collectives._calls import all_gather, all_reduce
from zerosim.collectives._shards import chunk_bounds
from zerosim.collectives._staging import Collected, phases
from zerosim.collectives._wire import wire_of
from zerosim.precision import cast, get_format
from zerosim.precision.quantize import (
    Quantized,
    amax_of,
    block_count,
    block_index,
    deepspeed_groups,
    dequantize,
    mxfp8_dequantize,
    mxfp8_quantize,
    quantize,
    scaled_cast,
    torchao_received,
)


def group_count(m: int, groups) -> int:
    """Groups for a piece of m elements: DeepSpeed's adaptive rule ("deepspeed"), or ceil(m / g) for a fixed g."""
    if groups == "deepspeed":
        return deepspeed_groups(m)
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be 'deepspeed' or a positive group size, got {groups!r}")
    return math.ceil(m / groups)


def qwz_piece(x, groups="deepspeed", bits: int = 8) -> Quantized:
    """One rank's piece as qwZ sends it: cast to fp16 (CUDAQuantizer.quantize: `param.to(..., dtype=torch.half)`),
    then quantized. A fixed group size pads the piece with zeros to whole groups (the zeros travel)."""
    x16 = cast(np.asarray(x), "fp16")
    m = x16.size
    if m == 0 and groups != "deepspeed":
        return Quantized(np.zeros(0, np.int8), np.zeros(0, np.float32), bits, 0)
    g = group_count(m, groups)
    if groups != "deepspeed" and g * groups != m:
        x16 = np.concatenate([x16, np.zeros(g * groups - m, np.float16)])
    return quantize(x16, bits, g)


def qwz_all_gather(cluster, pieces, counts=None, groups="deepspeed", out_format="fp16", tag: str = "") -> list:
    """ZeRO++ qwZ's int8 all-gather (module docstring). `counts`: each rank's piece size (default: equal pieces)."""
    n, backend = cluster.world_size, cluster.backend
    sizes = backend.all_meta([int(np.shape(p)[0]) for p in pieces])
    counts = tuple(counts) if counts is not None else (tuple(sizes) if len(sizes) == n else (sizes[0],) * n)
    padded = [padded_count(m, groups) for m in counts]  # elements each rank sends (whole groups)
    ngroups = [group_count(m, groups) if m or groups == "deepspeed" else 0 for m in counts]
    if backend.holds_values:
        quant = [qwz_piece(p, groups) for p in pieces]
        payload, scales = [q.payload for q in quant], [q.scales for q in quant]
    else:
        payload = [backend.empty((padded[r.index],), np.int8) for r in cluster.ranks]
        scales = [backend.empty((ngroups[r.index],), np.float32) for r in cluster.ranks]
    ints = gather_payload(cluster, payload, padded, "int8", f"{tag} (int8)")
    scl = all_gather(cluster, scales, counts=ngroups, tag=f"{tag} (scales)")
    out = []
    for got_q, got_s in zip(ints, scl):
        if not backend.holds_values:
            out.append(backend.empty((sum(counts),), get_format(out_format).dtype))
            continue
        parts, qa, sa = [], 0, 0
        for r in range(n):
            q = Quantized(got_q[qa : qa + padded[r]], got_s[sa : sa + ngroups[r]], 8, padded[r])
            parts.append(dequantize(q)[: counts[r]] if padded[r] else np.zeros(0, np.float16))
            qa, sa = qa + padded[r], sa + ngroups[r]
        joined = np.concatenate(parts)
        out.append(joined if get_format(out_format).name == "fp16" else cast(joined, out_format))  # `.to(dtype)`
    return Collected(out, ints.handle + scl.handle)


def padded_count(m: int, groups) -> int:
    """Elements a piece of m sends: m with DeepSpeed's groups, else zero-padded to whole groups of `groups`."""
    return m if groups == "deepspeed" else group_count(m, groups) * groups


def naive_qwz_all_gather(pieces, groups="deepspeed", out_format="fp16") -> list:
    """Naive twin: quantize and dequantize every piece here, join them, a copy for every rank."""
    parts = []
    for p in pieces:
        q = qwz_piece(p, groups)
        parts.append(dequantize(q)[: np.asarray(p).size] if q.numel else np.zeros(0, np.float16))
    joined = cast(np.concatenate(parts), out_format)
    return [joined.copy() for _ in pieces]


def gather_payload(cluster, arrays, counts, wire: str, tag: str) -> list:
    """An all-gather-v of integer (or byte) payloads: the ring's own phase (or the backend's) over `counts`."""
    w = wire_of(np.dtype(np.int8 if wire == "int8" else np.uint8), wire)
    counts = tuple(int(c) for c in counts)
    bounds = chunk_bounds(None, counts)
    total = sum(counts)
    call = cluster.trace.begin("all_gather", "gather", cluster.world_size, total, w.name, tag)
    full = phases(cluster)[1](cluster, list(arrays), bounds, total, w, call)
    cluster.trace.end(call)
    return Collected(full, cluster.trace.handle(call))


def fp8_amax_all_reduce(cluster, pieces_per_rank, tag: str = "fp8 amax") -> list:
    """torchao's amax all-reduce: each rank's amax of each of its pieces (0.0 for an empty one:
    precision/quantize/_fp8_scaling.py says why), stacked in the pieces' dtype (`torch.stack(max_weights)` of
    `_foreach_norm`s in the weights' dtype; fp32 if they differ), one MAX all-reduce (exact in any dtype). Returns the
    (k,) global amaxes per local rank, with `.handle`. The precompute path sends every unit's amax at once,
    amax_to_scale's one unit's before its gather."""
    dtypes = {x.dtype for ps in pieces_per_rank for x in ps}
    dtype = dtypes.pop() if len(dtypes) == 1 else np.dtype(np.float32)
    dtype = dtype if get_format(dtype).name in ("fp16", "bf16", "fp32") else np.dtype(np.float32)
    stacked = [np.array([amax_of(x) for x in ps], dtype) if cluster.backend.holds_values
               else cluster.backend.empty((len(ps),), dtype) for ps in pieces_per_rank]
    return all_reduce(cluster, stacked, op="max", tag=tag)


def fp8_all_gather(cluster, pieces, scale, counts=None, out_format="bf16", fmt="fp8_e4m3", tag: str = "") -> list:
    """Every rank casts its (high-precision) piece straight to fp8 with the agreed `scale` and all-gathers the bits;
    each receiver computes fl_out(fl32(q / S)) (module docstring)."""
    backend, n = cluster.backend, cluster.world_size
    f = get_format(fmt)
    sizes = backend.all_meta([int(np.shape(p)[0]) for p in pieces])
    counts = tuple(counts) if counts is not None else (tuple(sizes) if len(sizes) == n else (sizes[0],) * n)
    if backend.holds_values:
        bits = [scaled_cast(p, scale, f) for p in pieces]
    else:
        bits = [backend.empty((int(np.shape(p)[0]),), f.dtype) for p in pieces]
    got = all_gather(cluster, bits, counts=counts, tag=f"{tag} ({f.name})")
    if not backend.holds_values:
        return Collected([backend.empty(g.shape, get_format(out_format).dtype) for g in got], got.handle)
    return Collected([torchao_received(g, scale, out_format) for g in got], got.handle)


def naive_fp8_all_gather(pieces, out_format="bf16", fmt="fp8_e4m3") -> list:
    """Naive twin of the amax all-reduce and the gather: the global amax here, one scale, every piece cast."""
    from zerosim.precision.quantize import torchao_scale

    amax = max((float(amax_of(p)) for p in pieces), default=0.0)
    s = torchao_scale(np.float32(amax), fmt)
    joined = np.concatenate([scaled_cast(p, s, fmt) for p in pieces])
    return [torchao_received(joined, s, out_format) for _ in pieces]


def mxfp8_all_gather(cluster, pieces, counts=None, out_format="bf16", tag: str = "") -> list:
    """MXFP8 pieces: e4m3 in blocks of 32 of each rank's piece, and one E8M0 byte a block, both all-gathered."""
    backend, n = cluster.backend, cluster.world_size
    sizes = backend.all_meta([int(np.shape(p)[0]) for p in pieces])
    counts = tuple(counts) if counts is not None else (tuple(sizes) if len(sizes) == n else (sizes[0],) * n)
    nblocks = [block_count(m) for m in counts]
    if backend.holds_values:
        made = [mxfp8_quantize(p) for p in pieces]
        q, e = [m[0] for m in made], [m[1] for m in made]
    else:
        q = [backend.empty((counts[r.index],), get_format("fp8_e4m3").dtype) for r in cluster.ranks]
        e = [backend.empty((nblocks[r.index],), np.uint8) for r in cluster.ranks]
    got_q = all_gather(cluster, q, counts=counts, tag=f"{tag} (fp8_e4m3)")
    got_e = gather_payload(cluster, e, nblocks, "uint8", f"{tag} (e8m0 scales)")
    if not backend.holds_values:
        out = [backend.empty((sum(counts),), get_format(out_format).dtype) for _ in got_q]
        return Collected(out, got_q.handle + got_e.handle)
    # each receiver's whole buffer at once, every piece in its own blocks: the dequantization is elementwise, so each
    # piece gets the bits it gets alone (the naive twin dequantizes piece by piece), in one call, not N
    blocks = block_index(counts)
    out = [mxfp8_dequantize(gq, ge, out_format, blocks) for gq, ge in zip(got_q, got_e)]
    return Collected(out, got_q.handle + got_e.handle)


def naive_mxfp8_all_gather(pieces, out_format="bf16") -> list:
    """Naive twin: each piece in blocks of 32 here, joined."""
    joined = np.concatenate([mxfp8_dequantize(*mxfp8_quantize(p), out_format) for p in pieces])
    return [joined.copy() for _ in pieces]
