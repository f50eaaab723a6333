"""The cross-entropy's real peak: what each way of computing the LM loss holds while it runs.

Letters: T = B·L tokens, V vocabulary, d model width. The loss op saves its cache and frees it within the op
(models/_run.py: forward, then backward at once), so every tensor listed here counts at the loss's peak together:
the list is what is alive at the worst moment, not everything ever allocated.

    variant        held at the peak                                                        bytes (fp32 = 4)
    probabilities  softmax probabilities (T, V) fp32 and the labels: what a fused            4·T·V
                   cross-entropy kernel keeps (zerosim's LMCrossEntropy; Megatron's
                   fused vocab cross-entropy)
    eager          F.cross_entropy(logits.float(), labels) in eager mode (torchtitan's        12·T·V
                   loss, HF's ForCausalLMLoss): log_softmax's fp32 output (saved for its
                   backward), then during backward nll_loss's fp32 gradient (a (T, V)
                   zeros scattered) and log_softmax's fp32 gradient, alive together while
                   LogSoftmaxBackward runs. The 16-bit logits are freed before backward
                   (torchtitan's train step deletes `pred` first)
    chunked        torchtune's CEWithChunkedOutputLoss (num_output_chunks = 8): each chunk's   4·T·V + 8·T·V/8
                   fp32 log_softmax saved (all of them, 4·T·V), one chunk's two gradients
                   alive at a time
    fused-linear   Liger-Kernel's fused linear cross-entropy (LigerFusedLinearCrossEntropy-    8·c·V
                   Function): the head's product and the loss chunk by chunk, c =
                   next_pow2(ceil(T / ceil(V / d))) rows, the gradient computed in forward:
                   one chunk's fp32 logits and gradient at a time, no (T, V) tensor

Beside tensor parallelism, torch's `loss_parallel` (torchtitan's loss with TP) runs the eager loss on each rank's
V/t columns through DTensor's own decomposition (torch 2.13.0, torch/distributed/tensor/parallel/loss.py): forward
`_log_softmax` (x − max, exp, the sum, its all-reduce, then the result), backward `_nll_loss_and_log_softmax_backward`,
nll_loss's and log_softmax's fused into `(grad_input + torch.exp(x)) * grad_output`, where x is the saved log_softmax:

    eager under    the saved log_softmax, grad_input (zeros_like(x), the targets scattered),  16·T·V/t
    loss_parallel  exp(x), and grad_input + exp(x), alive together while the sum is made
                   (and again beside the product): one (T, V/t) fp32 tensor more than the
                   fused kernels' peak; the forward's 16-bit logits, x in fp32, x − max and
                   exp alive together are 14·T·V/t, less

torch 2.13.0 on two gloo processes, its profiler's CPU allocations: 16.03 bytes an element at loss_parallel's peak,
12.00 for `F.cross_entropy` on a plain tensor (tests/test_tp_activations.py holds the spec to both and to the steps).

The eager peak is 3x the probabilities' (Llama 3's V = 128,256 at T = 16,384: 25.2 GB against 8.4 GB); that is
the "loss spike" users report when the vocabulary is large.
"""

from __future__ import annotations

import math

import numpy as np

LOSSES = ("probabilities", "eager", "chunked", "fused-linear")
CHUNKS = 8  # torchtune's num_output_chunks default


def fused_linear_rows(tokens: int, vocab: int, d_model: int) -> int:
    """Liger's chunk: next_pow2(ceil(T / ceil(V / d))) rows (fused_linear_cross_entropy.py, `inc_factor`)."""
    rows = math.ceil(tokens / math.ceil(vocab / d_model))
    return min(tokens, 1 << max(rows - 1, 0).bit_length())


def loss_spec(variant: str, B: int, L: int, V: int, d_model: int, acc=np.float32, loss_parallel: bool = False) -> dict:
    """{name: (shape, dtype)} alive at the loss's peak (module docstring), the labels (B, L) int64 last; V the
    columns a rank holds. `loss_parallel`: the columns are a TP rank's and torch's `loss_parallel` runs the loss
    (the eager loss through DTensor's decomposition)."""
    T, f32 = B * L, np.dtype(acc)
    labels = {"labels": ((B, L), np.dtype(np.int64))}
    if loss_parallel and variant == "eager":
        return {"log_softmax": ((T, V), f32), "nll_loss grad": ((T, V), f32), "exp(log_softmax)": ((T, V), f32),
                "nll_loss grad + exp": ((T, V), f32), **labels}
    if variant == "probabilities":
        return {"probabilities": ((T, V), f32)} | labels
    if variant == "eager":
        return {"log_softmax": ((T, V), f32), "nll_loss grad": ((T, V), f32), "log_softmax grad": ((T, V), f32),
                **labels}
    if variant == "chunked":
        c = math.ceil(T / CHUNKS)
        return {"log_softmax (all chunks)": ((T, V), f32), "nll_loss grad (one chunk)": ((c, V), f32),
                "log_softmax grad (one chunk)": ((c, V), f32)} | labels
    if variant == "fused-linear":
        c = fused_linear_rows(T, V, d_model)
        return {"logits fp32 (one chunk)": ((c, V), f32), "logits grad (one chunk)": ((c, V), f32)} | labels
    raise ValueError(f"unknown loss {variant!r}; choose one of {LOSSES}")
