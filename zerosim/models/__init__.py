"""Models with explicit forward/backward pairs, layer by layer, and the driver engines and the oracle call.

    _model.py      Model, ParamSpec: a list of layers, a loss, checkpoint blocks, one flat parameter vector
    _run.py        Pass, forward_backward, loss_and_grad, predict: one micro-batch through a model, op by op
    _schedule.py   schedule: the order one micro-batch visits the layers (forward, loss, recompute, backward)
    _decoder.py    what the decoder families share: Decoder, seed 001's checkpointing strategies by name
    layers/        the forward/backward pairs: Linear, norms, rotary, attention and its flash twin, losses
    mlp/           TinyNet (seed 004) and MLP
    gpt/           the GPT family (GPT-2's layout), its files paired with ...
    llama/         ... the Llama family's (Llama, Mistral, Qwen2)
    meta/          data-less twins for the meta backend: MetaModel, MetaDecoder
    hf/            a Hugging Face config.json read locally; the configs shipped with zerosim
    data/          synthetic tasks: regression, classification, sequence copying

Each family's face (zerosim.models.gpt, .llama, ...) lists its units; the names below are the ones most runs use.
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._model": ("Model", "ParamSpec"),
    "._run": ("Pass", "done", "forward_backward", "loss_and_grad", "passes_of", "predict"),
    "._schedule": ("Op", "needs_params", "schedule", "split_backward"),
    "._stacked": ("run_stacked", "stacks"),
    ".data": ("answer_positions", "make_classification", "make_regression", "make_sequence_task"),
    ".gpt": (
        "GPT", "AttentionBlock", "Embedding", "FFNBlock", "LMHead", "MetaGPT", "TransformerBlock", "embedding_backward",
        "embedding_forward",
    ),
    ".hf": ("DecoderConfig", "read_hf_config", "shipped_config", "shipped_configs"),
    ".layers": (
        "GELU", "HalfMSE", "Layer", "Linear", "LMCrossEntropy", "Loss", "ReLU", "SoftmaxCrossEntropy", "acc_dtype",
        "attention_backward", "attention_forward", "flash_attention_backward", "flash_attention_forward",
        "gelu_backward", "gelu_forward", "get_loss", "layernorm_backward", "layernorm_forward", "linear_backward",
        "linear_forward", "relu_backward", "relu_forward", "softmax_backward", "softmax_forward",
    ),
    ".llama": ("Llama", "MetaLlama"),
    ".meta": ("MetaModel",),
    ".mlp": ("MLP", "TinyNet"),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
