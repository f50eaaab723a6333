"""RMSNorm as a forward/backward pair that keeps its input and one fp32 statistic per row, not its output.

Letters: R rows (tokens, B·L), d the normalized width. Zhang & Sennrich 2019; Hugging Face transformers,
models/llama/modeling_llama.py, `LlamaRMSNorm.forward`:

    input_dtype = x.dtype;  x = x.to(float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    return weight * x.to(input_dtype)

so here, with acc = fp32 (float64 under fp64):

    rstd = 1 / sqrt(mean(x_acc²) + eps)         (R,) acc: the statistics in fp32, as LlamaRMSNorm
    x̂    = cast(x_acc · rstd, fmt)                the normalized input, rounded to the input's format first ...
    y    = cast(w ⊙ x̂, fmt)                       ... then times the weight, rounded again (w and x̂ both in fmt)
    backward:  dw = Σ_rows dy ⊙ x̂,   g = dy ⊙ w,   dx = rstd · (g − x̂₃₂ · mean(g ⊙ x̂₃₂)),  x̂₃₂ = x_acc · rstd

(the casts count as the identity in backward, as autograd's `.to()` does). What is saved: the input x (fmt)
and rstd (acc), as a fused RMSNorm keeps them (apex `FusedRMSNormAffineFunction` saves input, weight and
invvar); x̂ and y are rebuilt. HF's eager module, run by autograd, keeps more: the fp32 copy of x, the
variance and x̂ (about 6 bytes per element in bf16 instead of 2).
"""

from __future__ import annotations

import numpy as np

from zerosim.models.layers._basic import acc_dtype
from zerosim.models.layers._layernorm import row_sums
from zerosim.precision import cast, get_format

RMS_EPS = 1e-6  # LlamaRMSNorm's default eps (the configs' rms_norm_eps; Llama 2 and 3 ship 1e-5)

# Per element: forward square (1), sum (1), times rstd (1), times w (1) = 4. Backward: x̂ again (1),
# dw (2), g = dy w (1), g x̂ and its sum (2), x̂ · mean (1), g − (1), times rstd (1) = 9. Rebuilding y for
# the next Linear: x̂ and w x̂ (2). The per-row sqrt and division are not counted (one per d elements).
RMS_FLOPS = {"forward": 4, "backward": 9, "rebuild output": 2}


def _normalized(x: np.ndarray, rstd: np.ndarray) -> np.ndarray:
    """x̂₃₂ = x · rstd in acc (unrounded): the one formula forward and backward share."""
    return x.astype(rstd.dtype) * rstd[..., None]


def rmsnorm_forward(x: np.ndarray, w: np.ndarray, fmt, eps: float = RMS_EPS) -> tuple[np.ndarray, tuple]:
    """y (..., d) in fmt; cache (x, rstd (...,) in acc)."""
    acc = acc_dtype(get_format(fmt))
    x_acc = x.astype(acc)
    rstd = (1 / np.sqrt(np.square(x_acc).mean(axis=-1, dtype=acc) + acc(eps))).astype(acc)  # (...,) acc
    cache = (x, rstd)
    return rmsnorm_output(cache, w, fmt), cache


def rmsnorm_output(cache: tuple, w: np.ndarray, fmt) -> np.ndarray:
    """y = cast(w ⊙ cast(x̂, fmt), fmt) from the saved (x, rstd): bitwise the forward's output."""
    x, rstd = cache
    f = get_format(fmt)
    xhat = cast(_normalized(x, rstd), f).astype(rstd.dtype)  # LlamaRMSNorm's .to(input_dtype)
    return cast(w.astype(rstd.dtype) * xhat, f)


def rmsnorm_backward(dy: np.ndarray, cache: tuple, w: np.ndarray, fmt,
                     n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(dx (..., d), dw (d,)) in fmt; the sums run in acc. `n`: dy and x hold n ranks' micro-batches stacked along
    axis 0 (models/_stacked.py), and dw is (n, d), each rank's sum over its own rows (`row_sums`)."""
    x, rstd = cache
    f, acc = get_format(fmt), rstd.dtype
    xhat = _normalized(x, rstd)  # (..., d) acc
    dy_acc = dy.astype(acc)
    dw = row_sums(dy_acc * cast(xhat, f).astype(acc), n)  # the weight multiplied the rounded x̂
    g = dy_acc * w.astype(acc)
    m = (g * xhat).mean(axis=-1, keepdims=True, dtype=acc)
    dx = rstd[..., None] * (g - xhat * m)
    return cast(dx, f), cast(dw, f)


def rmsnorm_flops(rows: int, d: int, kind: str) -> int:
    """RMS_FLOPS[kind] per element of a (rows, d) input."""
    return RMS_FLOPS[kind] * rows * d
