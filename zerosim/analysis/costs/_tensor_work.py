"""What one tensor-parallel rank's unit computes and moves, by kernel class: the calibrated time model's view of a TP
slice (analysis/timeline/_kernel_time.py), as costs/_kernel_work.py gives it for an unsplit unit.

Letters: B batch, L sequence length, T the TP degree, d width, H_r = H/T query heads, G_r = G/T key/value heads,
d_h head width, F_r = F/T feed-forward columns, V_r = V/T vocabulary rows. A TP rank's units (parallel/tensor/
_model.py) and the tokens each runs on:

    unit                 GEMMs (M, N, K), forward, per weight   elementwise (eager | compiled)       tokens
    embed (vocab rows)   none: a gather                         the gather's copy of d               B·L
    ln1 / lnf (Norm)     none                                   the norm                             B·L/T with SP
    ln2 (add, then norm) none                                   the residual add, the norm           B·L/T with SP
    attn (column → row)  q, k, v: (B·L, H_r·d_h | G_r·d_h, d);  rotary on Q and K, repeat_kv's       B·L
                         o: (B·L, d, H_r·d_h); attention on H_r  copies, the output's copy
    mlp (column → row)   gate, up: (B·L, F_r, d); down:          SwiGLU (GELU for the GPT) on F_r     B·L
                         (B·L, d, F_r)
    out (Add)            none                                   the residual add                     B·L/T with SP
    head (vocab rows)    (B·L, V_r, d)                          none (its norm is lnf)               B·L

so the same kernels as the unsplit block's (unit_work), each on the rank's slice: a GEMM's N or K divided by T,
attention on H/T heads, the norms and residuals on L/T tokens with sequence parallelism (Megatron's
LayerNorm / bias-dropout-add on the sequence shard; torchtitan's SequenceParallel on the norms).

fp8 GEMMs: the column-row units' GEMMs, as torchao's Float8Linear converts every linear of the blocks
(torchtitan's float8 converter leaves `output` out: torchtitan/components/quantization/float8.py, the
`filter_fqns` default ["output"]) and Megatron-Core runs the blocks' linears as Transformer Engine's fp8 GEMMs
(Transformer Engine 2.18, transformer_engine/pytorch/module/linear.py `_Linear.forward`), with their casts. The head
stays 16-bit. The GEMM shapes are the rank's, so `--fp8-gemms` shortens a TP GEMM by the factor it gives the same
shape at TP 1.
"""

from __future__ import annotations

from dataclasses import replace

from zerosim.analysis.costs._kernel_work import BACKWARD_BYTES, Work, _bytes, unit_work

PASS_BYTES = {"forward": 1, "recompute": 1, "backward": BACKWARD_BYTES}  # a backward moves twice a forward's bytes


def _on_shard(unit) -> bool:
    """A unit that runs on the sequence shard with sequence parallelism: the norms and the residual adds."""
    return unit.role == "replicated"


def tp_unit_work(unit, B: int, L: int, kind: str, kernels: str, fp8: bool, tp: int, sp: bool) -> Work:
    """The work of one TP rank's `unit` (parallel/tensor's Norm, Add, ColumnRow, Embedding, Head) in pass `kind`
    for a micro-batch of B sequences of L tokens (see the module docstring); `fp8`: the column-row GEMMs in
    float8."""
    tokens = B * (L // tp if sp and _on_shard(unit) else L)
    scale = PASS_BYTES[kind]
    if _on_shard(unit):  # Norm (with the add before it, if any) or Add: memory-bound only
        d = unit.d
        norm = getattr(unit, "kind", None)
        per_token = 0.0 if norm is None else _bytes(norm, d, kernels)
        if norm is None or unit.bias is not None:  # Add, or the add before ln2
            per_token += _bytes("residual", d, kernels)
        return Work(memory=per_token * tokens * scale)
    x_shape = (B, L) if unit.role == "vocab" else (B, L, unit.d)  # the embedding takes token ids
    column_row = unit.role == "column-row"
    w = unit_work(unit, x_shape, kind, kernels, fp8 and column_row)
    if not column_row:
        return w
    per_token = 0.0
    heads = getattr(unit, "heads", None)
    if hasattr(unit, "rope_theta"):  # the Llama's attention: rotary on Q and K, repeat_kv's copies, the output's copy
        H, G, dh = unit.heads, unit.kv_heads, unit.head_dim
        per_token += _bytes("rope", H * dh, kernels) + _bytes("rope", G * dh, kernels) + _bytes("copy", H * dh, kernels)
        per_token += 2 * _bytes("copy", H * dh, kernels) if G < H else 0
    elif heads is None:  # an MLP region: SwiGLU's or GELU's elementwise on F_r columns
        per_token += _bytes("swiglu" if "gate_proj" in unit.param_shapes else "gelu", unit.ffn, kernels)
    return replace(w, memory=w.memory + per_token * tokens * scale)
