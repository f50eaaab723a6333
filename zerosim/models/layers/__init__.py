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

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._attention": (
        "MODES", "attention_backward", "attention_flops", "attention_forward", "check_heads", "check_mode",
        "merge_heads", "softmax_backward", "softmax_forward", "split_heads",
    ),
    "._attention_merge": ("LOG1P", "accumulate", "correct_out", "merge_lse", "merge_sigmoid"),
    "._basic": (
        "GELU", "Layer", "Linear", "ReLU", "acc_dtype", "gelu_backward", "gelu_forward", "linear_backward",
        "linear_forward", "relu_backward", "relu_forward", "rounded", "written_into",
    ),
    "._flash_attention": ("BLOCK", "flash_attention_backward", "flash_attention_flops", "flash_attention_forward"),
    "._layernorm": ("layernorm_backward", "layernorm_flops", "layernorm_forward", "layernorm_output", "row_sums"),
    "._lm_loss": ("LMCrossEntropy",),
    "._losses": ("LOSSES", "HalfMSE", "Loss", "SoftmaxCrossEntropy", "get_loss"),
    "._prenorm": ("prenorm_linear_forward", "prenorm_residual_backward", "prenorm_residual_flops", "residual_add"),
    "._rmsnorm": ("RMS_EPS", "rmsnorm_backward", "rmsnorm_flops", "rmsnorm_forward", "rmsnorm_output"),
    "._rotary": ("ROPE_THETA", "rope_backward", "rope_flops", "rope_forward", "rope_tables"),
    "._token_linear": ("linear_flops", "tokens_linear_backward", "tokens_linear_forward", "token_places",
                      "weight_rows"),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
