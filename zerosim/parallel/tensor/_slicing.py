"""Which part of each parameter a TP rank holds, as data: the whole model's flat vector cut into a rank's, and the
ranks' joined back.

Letters: T the TP degree, r a rank's position in its TP group (its TP coordinate). A rule per parameter:

    rows     dim 0 cut into T blocks, block r            column-parallel weights and biases (W_qkv, W1, b1,
                                                         q/k/v_proj, gate/up_proj), the vocabulary's rows (wte,
                                                         embed_tokens, w_head, lm_head)
    cols     dim 1 cut into T blocks, block r            row-parallel weights (W_o, W2, o_proj, down_proj)
    thirds   each third of dim 0 cut into T blocks       the GPT's fused W_qkv = [W_q; W_k; W_v]: the rank's heads of
                                                         each (Megatron interleaves Q, K and V per head group in one
                                                         linear_qkv: another layout of the same shards)
    whole    every rank a copy                           norms, row-parallel biases, the position table

Megatron-LM core_v0.19.0 layers.py: ColumnParallelLinear's weight is (output_size / T, input_size), its bias
(output_size / T,); RowParallelLinear's weight is (output_size, input_size / T), its bias whole; torch's
ColwiseParallel shards nn.Linear's weight as Shard(0), RowwiseParallel as Shard(1) (torch/distributed/tensor/
parallel/style.py).
"""

from __future__ import annotations

import numpy as np


def _block(n: int, r: int, tp: int) -> slice:
    step = n // tp
    return slice(r * step, (r + 1) * step)


def _rows(w, r, tp):
    return w[_block(w.shape[0], r, tp)]


def _cols(w, r, tp):
    return w[:, _block(w.shape[1], r, tp)]


def _thirds(w, r, tp):
    return np.concatenate([_rows(part, r, tp) for part in np.split(w, 3, axis=0)])


def _join_thirds(parts):
    thirds = [np.split(p, 3, axis=0) for p in parts]  # per rank: its (q, k, v) rows
    return np.concatenate([np.concatenate([t[i] for t in thirds]) for i in range(3)])


RULES = {  # rule -> (the rank's part of the whole tensor, the whole tensor from every rank's part in TP order)
    "rows": (_rows, lambda parts: np.concatenate(parts, axis=0)),
    "cols": (_cols, lambda parts: np.concatenate(parts, axis=1)),
    "thirds": (_thirds, _join_thirds),
    "whole": (lambda w, r, tp: w, lambda parts: parts[0]),
}


def local_flat(model, whole, full, position: int):
    """The (P_local,) fp32 vector TP position `position` starts from: each local parameter cut from `whole`, the
    (P,) flat vector of the whole model `full`, by its rule (`model.sources`)."""
    out = np.zeros(model.num_params, np.float32)
    full_specs = _specs_by_key(full)
    for spec in model.specs:
        key, rule = model.sources[(spec.layer, spec.name)]
        f = full_specs[key]
        tensor = np.asarray(whole[f.offset:f.offset + f.size]).reshape(f.shape)
        out[spec.offset:spec.offset + spec.size] = RULES[rule][0](tensor, position, model.tp).reshape(-1)
    return out


def whole_flat(model, parts: list, full):
    """The (P,) flat vector of the whole model `full` from the T ranks' (P_local,) vectors, in TP order (a
    replicated parameter is taken from position 0)."""
    out = np.zeros(full.num_params, np.asarray(parts[0]).dtype)
    full_specs = _specs_by_key(full)
    for spec in model.specs:
        key, rule = model.sources[(spec.layer, spec.name)]
        f = full_specs[key]
        pieces = [np.asarray(p[spec.offset:spec.offset + spec.size]).reshape(spec.shape) for p in parts]
        out[f.offset:f.offset + f.size] = RULES[rule][1](pieces).reshape(-1)
    return out


def _specs_by_key(full) -> dict:
    """The whole model's parameters by (block, name): "block3" for both a block unit and its sublayers'."""
    return {(full.layers[s.layer].name.split(".")[0], s.name): s for s in full.specs}
