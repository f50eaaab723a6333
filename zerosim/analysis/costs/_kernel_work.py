"""The work of one unit's forward, recompute or backward, split by kernel class: GEMMs by shape, attention FLOPs,
bytes of memory-bound kernels. What the calibrated time model (zerosim.analysis.timeline._kernel_time) charges.

Letters: B batch, L sequence length, T = B·L tokens, d model width, H query heads, G key/value heads, d_h head
width, F feed-forward width, V vocabulary.

GEMMs come from the unit's own 2-D weights (every one but the embedding tables, which are gathers): a weight
(out, in) applied to T tokens is one (M, N, K) = (T, out, in) product forward, and two backward, dX (T, in, out)
and dW (out, in, T). Attention is the flash kernel's causal work, as FlashAttention's benchmarks count it: the
forward 4·B·H·L²·d_h / 2 (the masked half of the tiles skipped), the backward 2.5 times that (five products
against two). "standard" attention (P in memory) runs its two products as batched GEMMs over the whole L×L and
moves P through HBM: 8 bytes per score forward (write S, softmax read and write, read P), 16 backward.

Memory-bound kernels, per token, as their bytes read + written (ELEMENTWISE). "eager" is op by op, as HF
Transformers' modeling_llama.py and torchtitan's model run them in PyTorch eager mode (each op reads its inputs
from HBM and writes its output): its RMSNorm upcasts to fp32 (x.to(float32), pow, mean, rsqrt, mul, .to(bf16),
weight mul: 20·d read + 16·d written), its rotary is rotate_half's mul, neg, cat, mul, add in 16 bits
(11·w read + 9·w written for a tensor of width w), SwiGLU is silu then mul (6·F read + 4·F written). "compiled"
is what Inductor fuses them into: one pass per norm (2d + 2d), per rotary (2w + 2w) and SwiGLU (4F + 2F).
Both presets copy repeat_kv's K and V to H heads and the attention output to (B, L, H·d_h) for o_proj, and add
two residuals (4d + 2d each). A GPT block (LayerNorm, GELU) moves LayerNorm's one kernel (2d + 2d) and GELU's
(8d + 8d) either way. A backward pass moves twice its forward's bytes (it reads the saved tensors and the incoming
gradient and writes the outgoing one: an assumption, not a count).

fp8 GEMMs (torchao Float8Linear, dynamic tensorwise scaling) add their casts: forward, an amax and a cast of the
input (2 + 2 read, 1 written per element) and of the weight; backward, the same for the output gradient plus the
transposed fp8 copies of the input and the gradient (3 bytes per element each).

The loss is the eager cross-entropy on fp32-upcast logits (torchtitan's `cross_entropy(pred.float(), ...)`, left
uncompiled when the blocks are compiled): forward .float() (2V read, 4V written), log_softmax (12V read, 4V
written), backward nll_loss's gradient (4V written), log_softmax's backward (8V read, 4V written), the cast back
(4V read, 2V written): 44V bytes per token.
"""

from __future__ import annotations

from zerosim._dataclass import dataclass

EMBEDDING_TABLES = ("embed_tokens", "wte", "wpe")  # gathered by token or position: no GEMM
BACKWARD_BYTES = 2  # a backward pass moves this many times its forward's elementwise bytes (module docstring)
FP8_CAST = {"forward": (5, 5), "backward": (8 + 3, 3)}  # bytes per (activation, weight) element cast to fp8


@dataclass(frozen=True)
class Work:
    """One op's work by kernel class."""

    gemms: tuple = ()  # ((M, N, K), ...) matrix products, 2·M·N·K FLOPs each
    attention_fwd: float = 0.0  # FLOPs of flash attention's forward kernel (causal work)
    attention_bwd: float = 0.0  # FLOPs of its backward kernel
    memory: float = 0.0  # bytes read + written by memory-bound kernels
    fp8: bool = False  # the GEMMs run in float8

    @property
    def gemm_flops(self) -> float:
        return sum(2.0 * m * n * k for m, n, k in self.gemms)


# bytes per token of each memory-bound op, (eager, compiled); w is the rotated tensor's width
ELEMENTWISE = {
    "rmsnorm": (lambda d: 36 * d, lambda d: 4 * d),
    "layernorm": (lambda d: 4 * d, lambda d: 4 * d),  # nn.LayerNorm is one kernel in eager mode too
    "rope": (lambda w: 20 * w, lambda w: 4 * w),
    "swiglu": (lambda f: 10 * f, lambda f: 6 * f),
    "gelu": (lambda f: 4 * f, lambda f: 4 * f),  # one kernel: 2F read, 2F written
    "residual": (lambda d: 6 * d, lambda d: 6 * d),
    "copy": (lambda w: 4 * w, lambda w: 4 * w),  # a 16-bit tensor read and written once (repeat_kv, transposes)
}
KERNELS = ("eager", "compiled")


def _bytes(op: str, width: int, kernels: str) -> float:
    return ELEMENTWISE[op][KERNELS.index(kernels)](width)


def weights(unit) -> list:
    """[(name, (out, in))] the unit's GEMM weights in forward order (its 2-D parameters but embedding tables)."""
    return [(k, s) for k, s in unit.param_shapes.items() if len(s) == 2 and k not in EMBEDDING_TABLES]


def attention_of(unit):
    """(H, G, d_h, mode) of the unit's attention, or None (duck-typed: LlamaBlock.attn, LlamaAttention, the GPT's
    TransformerBlock and AttentionBlock)."""
    unit = getattr(unit, "attn", unit)
    mode = getattr(unit, "attention", None)
    if mode is None or not hasattr(unit, "heads"):
        return None
    dh = getattr(unit, "head_dim", None) or unit.d // unit.heads
    return unit.heads, getattr(unit, "kv_heads", unit.heads), dh, mode


def elementwise_per_token(unit, kernels: str) -> float:
    """Forward bytes per token of the unit's memory-bound ops (ELEMENTWISE), found from its parameters' names."""
    p, total = unit.param_shapes, 0.0
    if "norm1.w" in p:  # a Llama attention sub-block: RMSNorm, rotary on Q and K, repeat_kv, output copy, residual
        H, G, dh, _ = attention_of(unit)
        d = p["norm1.w"][0]
        total += _bytes("rmsnorm", d, kernels) + _bytes("rope", H * dh, kernels) + _bytes("rope", G * dh, kernels)
        total += (2 * _bytes("copy", H * dh, kernels) if G < H else 0) + _bytes("copy", H * dh, kernels)
        total += _bytes("residual", d, kernels)
    if "norm2.w" in p:  # a Llama feed-forward sub-block: RMSNorm, SwiGLU, residual
        d, F = p["norm2.w"][0], p["up_proj"][0]
        total += _bytes("rmsnorm", d, kernels) + _bytes("swiglu", F, kernels) + _bytes("residual", d, kernels)
    if "ln1.g" in p:  # a GPT attention sub-block: LayerNorm, residual (Q, K, V and the output are views)
        total += _bytes("layernorm", p["ln1.g"][0], kernels) + _bytes("residual", p["ln1.g"][0], kernels)
    if "ln2.g" in p:  # a GPT feed-forward sub-block: LayerNorm, GELU, residual
        d = p["ln2.g"][0]
        total += _bytes("layernorm", d, kernels) + _bytes("gelu", p["w1"][0], kernels) + _bytes("residual", d, kernels)
    if "norm.w" in p:  # the Llama head's final RMSNorm
        total += _bytes("rmsnorm", p["norm.w"][0], kernels)
    if "lnf.g" in p:  # the GPT head's final LayerNorm
        total += _bytes("layernorm", p["lnf.g"][0], kernels)
    for table in ("embed_tokens", "wte"):  # the gather: 2d read, 2d written per token
        if table in p:
            total += _bytes("copy", p[table][1], kernels)
    return total


def gemm_work(unit, T: int, kind: str, recompute_weights=None) -> tuple:
    """([(M, N, K), ...] the unit's GEMMs on T tokens in pass `kind`, the bytes their fp8 casts would move): each
    weight (out, in) forward (T, out, in), backward dX (T, in, out) and dW (out, in, T) (module docstring)."""
    gemms, cast = [], 0.0
    for name, (out, inp) in weights(unit):
        if kind == "recompute" and recompute_weights is not None and name not in recompute_weights:
            continue
        if kind == "backward":
            gemms += [(T, inp, out), (out, inp, T)]
            cast += FP8_CAST["backward"][0] * T * out + FP8_CAST["backward"][1] * out * inp + 3 * T * inp
        else:
            gemms.append((T, out, inp))
            cast += FP8_CAST["forward"][0] * T * inp + FP8_CAST["forward"][1] * out * inp
    return gemms, cast


def unit_work(unit, x_shape: tuple, kind: str, kernels: str = "eager", fp8: bool = False,
              recompute_weights=None) -> Work:
    """The work of `unit` (a real layer: zerosim.models' LlamaBlock, TransformerBlock, ...) on an input of x_shape
    ((B, L, d), or (B, L) token ids for an embedding) in pass `kind` ("forward", "recompute", "backward").

    `recompute_weights`: for an op-level selective checkpoint, the weights whose products a recompute re-runs
    (the others' outputs were saved, and so was attention's); None: a recompute re-runs the whole forward.
    `fp8`: the unit's GEMMs run in float8 (the head's too, if the caller says so).

    Remembered by everything it reads of the unit (its parameters' names and shapes, its attention's heads, head width
    and mode) and the other arguments: a 70B plan's 80 alike blocks ask for one work each (`_WORK`)."""
    if kind not in ("forward", "recompute", "backward"):
        raise ValueError(f"unknown pass {kind!r}")
    key = (tuple((k, tuple(s)) for k, s in unit.param_shapes.items()), attention_of(unit), tuple(x_shape), kind,
           kernels, fp8, None if recompute_weights is None else frozenset(recompute_weights))
    w = _WORK.get(key)
    if w is None:
        if len(_WORK) >= 4096:  # a long session's models: start again rather than grow
            _WORK.clear()
        w = _WORK[key] = _unit_work(unit, x_shape, kind, kernels, fp8, recompute_weights)
    return w


_WORK = {}  # unit_work's answers by what it reads


def _unit_work(unit, x_shape: tuple, kind: str, kernels: str, fp8: bool, recompute_weights) -> Work:
    """`unit_work`, computed."""
    B, L = x_shape[0], x_shape[1]
    T = B * L
    gemms, cast = gemm_work(unit, T, kind, recompute_weights)
    memory = elementwise_per_token(unit, kernels) * T * (BACKWARD_BYTES if kind == "backward" else 1)
    if "embed_tokens" in unit.param_shapes or "wte" in unit.param_shapes:
        if kind == "backward":  # the (V, d) gradient: zeroed in fp32, accumulated, cast to 16 bits
            V, d = unit.param_shapes.get("embed_tokens", unit.param_shapes.get("wte"))
            memory += 10 * V * d
    fwd = bwd = 0.0
    att = attention_of(unit)
    if att is not None and not (kind == "recompute" and recompute_weights is not None):
        H, _, dh, mode = att
        full = 4.0 * B * H * L * L * dh  # the S and PV products over every score
        if mode == "flash":
            fwd, bwd = (full / 2, 0.0) if kind != "backward" else (0.0, 2.5 * full / 2)
        else:  # P in memory: batched GEMMs over all L×L scores, P through HBM
            n = 1 if kind != "backward" else 2
            gemms += [(L, L, dh)] * (2 * n * B * H)
            memory += (8 if kind != "backward" else 16) * B * H * L * L
    return Work(tuple(gemms), fwd, bwd, memory + (cast if fp8 else 0.0), fp8)


# bytes per token and vocabulary entry each loss moves (meta/_loss_peak.py names them): the eager one's 44 (module
# docstring); chunked runs the same ops a chunk at a time; a fused kernel ("probabilities": read the 16-bit logits,
# write fp32 probabilities, read them back, write the 16-bit gradient) 2 + 4 + 4 + 2; Liger's fused linear
# cross-entropy keeps each chunk's logits on chip but for one fp32 write and read of the gradient: 4 + 4
LOSS_BYTES = {"eager": 44, "chunked": 44, "probabilities": 12, "fused-linear": 8}


def loss_work(tokens: int, vocab: int, variant: str = "eager") -> Work:
    """The loss op's memory-bound bytes: LOSS_BYTES[variant] · T · V."""
    if variant not in LOSS_BYTES:
        raise ValueError(f"unknown loss {variant!r}; choose one of {tuple(LOSS_BYTES)}")
    return Work(memory=float(LOSS_BYTES[variant]) * tokens * vocab)
