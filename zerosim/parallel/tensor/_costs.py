"""What one TP rank holds and sends, by hand: Megatron's activation formulas term by term and TP's bytes a step — the
numbers the ledgers and the trace are checked against (a TP slice's model states by hand: tests/helpers.py).

Letters (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4): s sequence
length, b micro-batch, h hidden size, a attention heads, t the TP degree; 16-bit activations (2 bytes), 1-byte
dropout masks. Their Table 2, bytes per transformer layer on one rank:

    no parallelism                            sbh (34 + 5as/h)
    tensor parallel                           sbh (10 + 24/t + 5as/(ht))
    tensor + sequence parallel                sbh (34/t + 5as/(ht))
    tensor parallel, selective recompute      sbh (10 + 24/t)
    tensor + sequence, selective recompute    sbh (34/t)
    full recompute                            2sbh (the layer's input; with sequence parallelism 2sbh/t)

`MEGATRON_TERMS` is the sum written out (§4.1: attention 11sbh + 5as²b, MLP 19sbh, two LayerNorms 4sbh), each term
with what divides it and the zerosim buffer that is it. zerosim has no dropout, so its masks and the dropout's output
are not held (`zerosim=None`), and it keeps each norm's fp32 statistics, which the paper does not count:

    ledger bytes per layer = Σ Megatron's terms that zerosim holds + the norms' fp32 statistics

(tests/test_tensor_memory.py). For the Llama (no dropout in Llama's config either) the named tensors are the
unsplit unit's at H/t heads, G/t key/value heads and F/t columns, with the two GEMM inputs the TP units keep.
"""

from __future__ import annotations

import math
from zerosim._dataclass import dataclass


@dataclass(frozen=True)
class Term:
    """One activation of Megatron's per-layer sum."""

    name: str  # as the paper says it
    coefficient: int  # bytes per s·b·h (or per a·s²·b when `quadratic`)
    quadratic: bool  # an a·s²·b term (the attention scores)
    by_tp: bool  # divided by t (held per head or per column)
    zerosim: str | None  # the ledger's name of it in a TP unit (None: dropout, not modelled)


MEGATRON_TERMS = (  # §4.1, per transformer layer
    Term("LayerNorm 1 input", 2, False, False, "ln1.block input"),
    Term("QKV input (LayerNorm 1 output)", 2, False, False, "attn.attention input"),
    Term("QKᵀ inputs (Q and K)", 4, False, True, "attn.Q + attn.K"),
    Term("softmax output", 2, True, True, "attn.P"),
    Term("softmax dropout mask", 1, True, True, None),
    Term("dropout output (attention over V's input)", 2, True, True, None),
    Term("V", 2, False, True, "attn.V"),
    Term("output projection input", 2, False, True, "attn.attention output"),
    Term("attention dropout mask", 1, False, False, None),
    Term("LayerNorm 2 input", 2, False, False, "ln2.pre-FFN input"),
    Term("MLP input (LayerNorm 2 output)", 2, False, False, "mlp.FFN input"),
    Term("GeLU input", 8, False, True, "mlp.x1"),
    Term("GeLU output (second linear's input)", 8, False, True, "mlp.x2"),
    Term("MLP dropout mask", 1, False, False, None),
)


def _divisor(term: Term, t: int, sp: bool) -> int:
    return t if term.by_tp or sp else 1  # sequence parallelism cuts the rest along s


def term_bytes(term: Term, s: int, b: int, h: int, a: int, t: int, sp: bool) -> float:
    scale = a * s * s * b if term.quadratic else s * b * h
    return term.coefficient * scale / _divisor(term, t, sp)


def megatron_layer_bytes(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, selective: bool = False,
                         full: bool = False) -> float:
    """Table 2's bytes per layer (module docstring): full recompute keeps the input, selective drops the a·s²·b
    terms."""
    if full:
        return 2 * s * b * h / (t if sp else 1)
    return sum(term_bytes(x, s, b, h, a, t, sp) for x in MEGATRON_TERMS if not (selective and x.quadratic))


def megatron_formula(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, selective: bool = False) -> float:
    """The same, as Table 2 prints it: sbh(10 + 24/t + 5as/(ht)) and its variants."""
    quad = 0 if selective else 5 * a * s / (h * t)
    return s * b * h * ((34 / t if sp else 10 + 24 / t) + quad)


def zerosim_layer_bytes(s: int, b: int, h: int, a: int, t: int, sp: bool, selective: bool = False) -> float:
    """What a GPT TP unit block holds by the table: the terms zerosim holds, plus four fp32 norm statistics per token
    (LN1's and LN2's mean and rstd, s·b/t of them with sequence parallelism)."""
    held = sum(term_bytes(x, s, b, h, a, t, sp) for x in MEGATRON_TERMS
               if x.zerosim is not None and not (selective and x.quadratic))
    return held + 4 * 4 * s * b / (t if sp else 1)


def llama_layer_bytes(s: int, b: int, d: int, heads: int, kv_heads: int, head_dim: int, ffn: int, t: int, sp: bool,
                      selective: bool = False, width: int = 2, gathered: bool = False) -> float:
    """A Llama TP rank's named tensors per decoder layer (16-bit `width`, fp32 statistics):

        block input, attention input, pre-FFN input, FFN input     4 · s·b·d          (/t with SP; `gathered`:
                                                                                       the two GEMM inputs whole,
                                                                                       torch DTensor's layout)
        Q, attention output                                        2 · s·b·H·d_h / t
        K, V                                                       2 · s·b·G·d_h / t
        gate, up, h (SwiGLU)                                       3 · s·b·F / t
        P                                                          b·(H/t)·s²       ("standard" only)
        norm1 and norm2 rstd (fp32)                                2 · 4 bytes · s·b  (/t with SP)
    """
    cut = t if sp else 1
    inputs = 2 * s * b * d / cut + 2 * s * b * d / (1 if gathered else cut)
    elements = (inputs + 2 * s * b * heads * head_dim / t + 2 * s * b * kv_heads * head_dim / t
                + 3 * s * b * ffn / t + (0 if selective else b * heads / t * s * s))
    return elements * width + 2 * 4 * s * b / cut


def torchtitan_eager_layer_bytes(s: int, b: int, d: int, heads: int, kv_heads: int, head_dim: int, ffn: int, t: int,
                                 sp: bool, width: int = 2) -> float:
    """What torch's eager autograd keeps per Llama block on one TP rank under torchtitan's plan (_eager.py), flash
    attention (SDPA); c = t with SP, else 1:

        norm1, norm2: fp32 input, fp32 x·rstd, rstd         2 · (8·s·b·d + 4·s·b) / c
        attention input, FFN input (all-gathered)            2 · s·b·d · width
        q rotated, sdpa out                                  2 · s·b·H·d_h/t · width
        k rotated, v (enable_gqa: G heads)                   2 · s·b·G·d_h/t · width
        sdpa lse                                             4 · b·H/t·s
        gate, silu(gate), up, h                              4 · s·b·F/t · width
    """
    cut = t if sp else 1
    norms = 2 * (8 * s * b * d + 4 * s * b) / cut
    elements = (
        2 * s * b * d + 2 * s * b * heads * head_dim / t + 2 * s * b * kv_heads * head_dim / t + 4 * s * b * ffn / t
    )
    return norms + elements * width + 4 * b * heads / t * s


# -- bytes on the wire: TP's collectives in one micro-step ---------------------------------------------------------

# In units of one sequence-parallel phase, X·(t − 1)/t bytes a rank sends (X = b·s·h 16-bit activations; an
# all-reduce is two phases), where each unit's operators sit (_plan.py), forward (and again in a recomputation),
# backward. The GPT's embedding all-reduces then cuts (positions join after the reduce). Checkpointing recomputes the
# blocks only: the embedding and the head keep their caches (models/_decoder.py `saved_blocks`).
PHASES = {  # (sequence parallel) -> {part: phases}
    False: {"block forward": 4, "block backward": 4, "embedding forward": 2, "embedding backward": 0,
            "head forward": 0, "head backward": 2},
    True: {"block forward": 4, "block backward": 6, "embedding forward": 1, "embedding backward": 1,
           "head forward": 1, "head backward": 2},
}


def tp_bytes_per_micro_step(layers: int, b: int, s: int, h: int, t: int, sp: bool, recompute: bool = False,
                            gpt: bool = False, width: int = 2, embedding: bool = True, head: bool = True) -> float:
    """Bytes one rank sends in TP's collectives in one micro-step: the activations' phases (PHASES; the GPT's
    embedding all-reduces under SP too, 2 phases; `recompute` runs the blocks' forward again) and the loss's three fp32
    all-reduces of b·s statistics. `layers` blocks, with the `embedding` and the `head` (and the loss): a pipeline
    rank holds some blocks, the first the embedding, the last the head. Not counted: SP's all-reduce of the norms'
    gradients (at most (2·layers + 1)·h elements, once a step)."""
    p = PHASES[sp]
    block = p["block forward"] * (2 if recompute else 1) + p["block backward"]
    forward = 2 if gpt and sp else p["embedding forward"]
    first = forward + p["embedding backward"] if embedding else 0
    last = p["head forward"] + p["head backward"] if head else 0
    X = b * s * h * width
    loss = 3 * 2 * (t - 1) * math.ceil(b * s / t) * 4 if head else 0
    return (layers * block + first + last) * X * (t - 1) / t + loss
