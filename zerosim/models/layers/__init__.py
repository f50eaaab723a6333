"""Layers as explicit forward/backward pairs, each checked against float64 finite differences; the pieces the
model families build their units from.

Letters: B batch, L sequence length, D widths, d model width, H heads.

    _basic.py            Layer, Linear, ReLU, GELU (+ the plain *_forward / *_backward functions), acc_dtype
    _token_linear.py     Linear over token tensors (..., D_in), and a Linear's FLOPs
    _losses.py           Loss, HalfMSE ("mse"), SoftmaxCrossEntropy ("xent")
    _lm_loss.py          LMCrossEntropy: softmax cross-entropy over the vocabulary, per token
    _layernorm.py        LayerNorm (input and statistics saved)
    _rmsnorm.py          RMSNorm (fp32 statistics)
    _rotary.py           rotary position embeddings (RoPE), Hugging Face's layout
    _attention.py        causal attention and its softmax, step by step (seed 001 §5c); MODES
    _flash_attention.py  the tiled, memory-efficient twin: no L × L buffer
    _attention_merge.py  attention over key blocks put back together: the lse merge, the output correction, the
                         16-bit sums (ring attention's, with Transformer Engine's roundings)
    _prenorm.py          the pre-LN residual wrapper both sub-blocks share
"""

from zerosim.models.layers._attention import (
                                              MODES,
                                              attention_backward,
                                              attention_flops,
                                              attention_forward,
                                              check_heads,
                                              check_mode,
                                              merge_heads,
                                              softmax_backward,
                                              softmax_forward,
                                              split_heads,
)
from zerosim.models.layers._attention_merge import accumulate, correct_out, merge_lse
from zerosim.models.layers._basic import (
                                              GELU,
                                              Layer,
                                              Linear,
                                              ReLU,
                                              acc_dtype,
                                              gelu_backward,
                                              gelu_forward,
                                              linear_backward,
                                              linear_forward,
                                              relu_backward,
                                              relu_forward,
                                              rounded,
)
from zerosim.models.layers._flash_attention import (
                                              BLOCK,
                                              flash_attention_backward,
                                              flash_attention_flops,
                                              flash_attention_forward,
)
from zerosim.models.layers._layernorm import layernorm_backward, layernorm_flops, layernorm_forward, layernorm_output
from zerosim.models.layers._lm_loss import LMCrossEntropy
from zerosim.models.layers._losses import LOSSES, HalfMSE, Loss, SoftmaxCrossEntropy, get_loss
from zerosim.models.layers._prenorm import (
                                              prenorm_linear_forward,
                                              prenorm_residual_backward,
                                              prenorm_residual_flops,
                                              residual_add,
)
from zerosim.models.layers._rmsnorm import RMS_EPS, rmsnorm_backward, rmsnorm_flops, rmsnorm_forward, rmsnorm_output
from zerosim.models.layers._rotary import ROPE_THETA, rope_backward, rope_flops, rope_forward, rope_tables
from zerosim.models.layers._token_linear import linear_flops, tokens_linear_backward, tokens_linear_forward

__all__ = [
    "BLOCK", "GELU", "HalfMSE", "LMCrossEntropy", "LOSSES", "Layer", "Linear", "Loss", "MODES", "RMS_EPS", "ROPE_THETA",
    "ReLU", "SoftmaxCrossEntropy", "acc_dtype", "accumulate", "attention_backward", "attention_flops",
    "attention_forward", "check_heads", "check_mode", "correct_out", "flash_attention_backward",
    "flash_attention_flops", "flash_attention_forward", "gelu_backward", "gelu_forward", "get_loss",
    "layernorm_backward", "layernorm_flops", "layernorm_forward", "layernorm_output", "linear_backward", "linear_flops",
    "linear_forward", "merge_heads", "merge_lse", "prenorm_linear_forward", "prenorm_residual_backward",
    "prenorm_residual_flops", "relu_backward", "relu_forward", "residual_add", "rmsnorm_backward", "rmsnorm_flops",
    "rmsnorm_forward", "rmsnorm_output", "rope_backward", "rope_flops", "rope_forward", "rope_tables", "rounded",
    "softmax_backward", "softmax_forward", "split_heads", "tokens_linear_backward", "tokens_linear_forward",
]
