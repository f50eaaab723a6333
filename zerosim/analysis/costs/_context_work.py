"""What one context-parallel rank's unit computes and moves, by kernel class: the calibrated time model's view of a CP
rank (analysis/timeline/_kernel_time.py), as costs/_kernel_work.py gives it for an unsplit unit.

Letters: B batch, L_r = L / C the rank's tokens, C the CP degree, p the rank's position in its CP group, j the hop,
d width, H query heads, G key/value heads, d_h head width. A CP rank's attention sub-block is cut in three
(parallel/context/_model.py), and each part is charged the kernels the unsplit sub-block runs on its share:

    part        GEMMs, per weight, on B·L_r tokens      attention                          elementwise (eager|compiled)
    attn.qkv    W_qkv (GPT) or q, k, v (Llama)          none                               the norm; rotary on Q and
                                                                                           K (Llama)
    hop j /     none                                    4·B·H·d_h per query-key pair of    repeat_kv's copies of the
    gathered                                            its block (_blocks.py              keys it reads (G < H); the
                                                        `block_shapes`), half the pairs    merges, the final output
                                                        of a causal diagonal block;        correction (forward), the
                                                        backward 2.5x (five products       dQ, dK, dV adds (backward)
                                                        against two)
    attn.out    W_o                                     none                               the output's copy to
                                                                                           (B, L_r, H·d_h), the residual

so at every hop the time is the block's: under a causal mask a contiguous split gives position p one diagonal block
and p full ones (the last position the most), the zigzag split every position the same (_split.py says why), and
the sum over a rank's hops is L² / (2C) pairs under causal masking — 1/C of the unsplit sub-block's, as FlashAttention
counts it. The merges (Transformer Engine's `flash_attn_fwd_softmax_lse_correction`: read two fp32 rows, write
one, 12 bytes a row), the output correction once every hop is in (`flash_attn_fwd_out_correction`, per step and
element: read its 16-bit output, read and write the running one, 6 bytes) and backward's adds into dQ and into the
travelling dK, dV (read both 16-bit operands, write one: 6 bytes an element) are memory-bound. A backward pass moves
BACKWARD_BYTES times its forward's elementwise bytes, as the unsplit units' do.

torch's own ring (--cp-style torch, parallel/context/_torch_core.py) runs the same blocks, its backward in forward
order (unit hop j's backward is step C−1−j: `step_of`), and keeps its output and sums in fp32, op by op as eager
torch runs them (charged so under either kernel preset: its merges are the CP dispatcher's own Python; a compiled
block's fusion of them is not modelled). Per element of the block's rows (E) or of the rank's whole L_r rows (W),
in bytes, over every query head's K/V:

    forward, step 0      the output widened to fp32 (read 2, write 4): 6·E; repeat_kv's copies of K and V (G < H)
                         and their torch.cat for the all-gather (read 2, write 2 each): 4 per K/V element
    forward, step i > 0  widen (6), out − out_i (12), · sigmoid (8), out − that (12): 38·E; a partial step's
                         torch.cat of the halves: 8·W; per row the lse's five ops (52 bytes)
    forward, last step   the output rounded to the compute format (read 4, write 2): 6·W
    backward, step i     dQ += dq_ (read 4 and 2, write 4: 10·E_q), dK, dV += (10 per element each; step 0 onto
                         fp32 zeros, 4 more); a partial step's torch.cat 8·W; the sums' torch.cat for the send (8·W
                         each); the last step rounds dQ, dK, dV (6·W each)
"""

from __future__ import annotations

from zerosim.analysis.costs._kernel_work import BACKWARD_BYTES, Work, _bytes, gemm_work

FORWARD_ATTENTION = 4.0  # FLOPs per query-key pair and head width: the S and PV products (2 multiply-adds)
BACKWARD_FACTOR = 2.5  # the backward kernel's five products against the forward's two
MERGE_ROW_BYTES = 12  # merge_lse: read two fp32 log-sum-exps, write one
CORRECT_BYTES = 6  # correct_out: read the step's 16-bit output, read and write the running output
ADD_BYTES = 6  # a 16-bit add into a running sum: read both, write one


def heads_of(model) -> tuple:
    """(H, G, d_h) of the CP model's attention (the whole model's: a CP rank runs every head; beside TP of degree T,
    the TP rank's H / T and G / T, parallel/tensor's split of the heads)."""
    full, T = model.full, getattr(model, "tp", 1)
    H = full.n_heads
    return H // T, getattr(full, "n_kv_heads", H) // T, getattr(full, "head_dim", None) or full.d_model // H


def cp_unit_work(model, unit, B: int, tokens: int, kind: str, kernels: str, fp8: bool, position: int) -> Work:
    """The work of one CP rank's `unit` (a part of its attention sub-block: `unit.cp_part`) in pass `kind`, the rank
    at `position` of its CP group holding `tokens` (L_r) of each of its B sequences (see the module docstring)."""
    H, G, dh = heads_of(model)
    d, T = model.d_model, B * tokens
    scale = BACKWARD_BYTES if kind == "backward" else 1
    if unit.cp_part != "core":
        gemms, cast = gemm_work(unit, T, kind)
        tensor = getattr(unit, "role", None) in ("column", "row")  # TP's halves: its Norm and Add are TP's units
        rope = _bytes("rope", H * dh, kernels) + _bytes("rope", G * dh, kernels)  # rotary on Q and on K
        if unit.cp_part == "qkv":
            if "ln1.g" in unit.param_shapes:  # the GPT's LayerNorm
                per_token = _bytes("layernorm", d, kernels)
            elif tensor:  # TP's column half: the Llama's rotary (the norm before it is TP's Norm unit)
                per_token = rope if unit.gqa else 0.0
            else:  # the Llama's RMSNorm, rotary on Q and on K
                per_token = _bytes("rmsnorm", d, kernels) + rope
        else:  # the merged heads' copy for o_proj (the Llama's), the residual add (beside TP: TP's Add unit)
            per_token = (_bytes("copy", H * dh, kernels) if "o_proj" in unit.param_shapes else 0.0) + \
                (0.0 if tensor else _bytes("residual", d, kernels))
        return Work(tuple(gemms), memory=per_token * T * scale + (cast if fp8 else 0.0), fp8=fp8)
    from zerosim.parallel.context import block_shapes, block_work  # CP's own (and its models'): only a CP plan's

    hop = getattr(unit, "hop", None)
    if model.style == "torch":
        return _torch_step_work(model, unit, B, tokens, kind, position, H, G, dh)
    shapes = block_shapes(model.style, model.split, model.causal, model.cp, position, hop, tokens)
    flops = FORWARD_ATTENTION * B * H * dh * block_work(shapes)
    keys, rows = sum(k for _, k, _ in shapes), sum(q for q, _, _ in shapes)
    memory = (2 * _bytes("copy", H * dh, kernels) if G < H else 0.0) * B * keys * scale  # repeat_kv's K and V
    if kind == "backward":
        memory += ADD_BYTES * B * (H * dh * rows + 2 * G * dh * keys)
        return Work(attention_bwd=BACKWARD_FACTOR * flops, memory=memory)
    if hop is not None:
        memory += MERGE_ROW_BYTES * B * H * rows if hop else 0  # hop 0's lse is the first: nothing to merge
        if hop == model.cp - 1:  # every step's output corrected, once the last lse is in
            every = sum(q for j in range(model.cp) for q, _, _ in
                        block_shapes(model.style, model.split, model.causal, model.cp, position, j, tokens))
            memory += CORRECT_BYTES * B * H * dh * every
    return Work(attention_fwd=flops, memory=memory)


# torch's ring, bytes an element (module docstring)
WIDEN, MERGE, CAT, ROUND, LSE_ROW, GRAD_ADD, ZEROS, PACK = 6, 38, 8, 6, 52, 10, 4, 4


def _torch_step_work(model, unit, B: int, tokens: int, kind: str, position: int, H: int, G: int, dh: int) -> Work:
    """One step of torch's ring on CP position `position` (module docstring)."""
    from zerosim.parallel.context import block_shapes, block_work, step_of

    C, step = model.cp, step_of(unit.hop, model.cp, kind)
    shapes = block_shapes("torch", model.split, model.causal, C, position, step, tokens)
    flops = FORWARD_ATTENTION * B * H * dh * block_work(shapes)
    rows = sum(q for q, _, _ in shapes)  # the block's query rows (0: a skipped step)
    keys = sum(k for _, k, _ in shapes)
    W, per = B * H * tokens * dh, B * H * dh  # the whole output's elements; elements a row
    partial = 0 < rows < tokens and step > 0  # the second half of the rows only (the load-balanced i > p)
    if kind == "backward":
        memory = GRAD_ADD * per * (rows + 2 * keys) + (CAT * W if partial else 0) + 2 * CAT * W
        memory += ZEROS * 3 * W if step == 0 else 0
        memory += 3 * ROUND * W if step == C - 1 else 0
        return Work(attention_bwd=BACKWARD_FACTOR * flops, memory=memory)
    memory = (WIDEN if step == 0 else MERGE) * per * rows + (CAT * W if partial else 0)
    memory += LSE_ROW * B * H * rows if step else 0
    if step == 0:  # repeat_kv (G < H) and the all-gather's torch.cat of K and V
        memory += 2 * PACK * W + (2 * _bytes("copy", H * dh, "eager") * B * tokens if G < H else 0)
    if step == C - 1:
        memory += ROUND * W
    return Work(attention_fwd=flops, memory=memory)
