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

from zerosim.models._model import Model, ParamSpec
from zerosim.models._run import Pass, forward_backward, loss_and_grad, predict
from zerosim.models._schedule import Op, needs_params, schedule, split_backward
from zerosim.models.data import answer_positions, make_classification, make_regression, make_sequence_task
from zerosim.models.gpt import (
                                   GPT,
                                   AttentionBlock,
                                   Embedding,
                                   FFNBlock,
                                   LMHead,
                                   MetaGPT,
                                   TransformerBlock,
                                   embedding_backward,
                                   embedding_forward,
)
from zerosim.models.hf import DecoderConfig, read_hf_config, shipped_config, shipped_configs
from zerosim.models.layers import (
                                   GELU,
                                   HalfMSE,
                                   Layer,
                                   Linear,
                                   LMCrossEntropy,
                                   Loss,
                                   ReLU,
                                   SoftmaxCrossEntropy,
                                   acc_dtype,
                                   attention_backward,
                                   attention_forward,
                                   flash_attention_backward,
                                   flash_attention_forward,
                                   gelu_backward,
                                   gelu_forward,
                                   get_loss,
                                   layernorm_backward,
                                   layernorm_forward,
                                   linear_backward,
                                   linear_forward,
                                   relu_backward,
                                   relu_forward,
                                   softmax_backward,
                                   softmax_forward,
)
from zerosim.models.llama import Llama, MetaLlama
from zerosim.models.meta import MetaModel
from zerosim.models.mlp import MLP, TinyNet

__all__ = [
    "AttentionBlock", "DecoderConfig", "Embedding", "FFNBlock", "GELU", "GPT", "HalfMSE", "LMCrossEntropy", "LMHead",
    "Layer", "Linear", "Llama", "Loss", "MLP", "MetaGPT", "MetaLlama", "MetaModel", "Model", "Op", "ParamSpec", "Pass",
    "ReLU", "SoftmaxCrossEntropy", "TinyNet", "TransformerBlock", "acc_dtype", "answer_positions",
    "attention_backward", "attention_forward", "embedding_backward", "embedding_forward", "flash_attention_backward",
    "flash_attention_forward", "forward_backward", "gelu_backward", "gelu_forward", "get_loss", "layernorm_backward",
    "layernorm_forward", "linear_backward", "linear_forward", "loss_and_grad", "make_classification",
    "make_regression", "make_sequence_task", "needs_params", "predict", "read_hf_config", "relu_backward",
    "relu_forward", "schedule", "shipped_config", "shipped_configs", "softmax_backward", "softmax_forward",
    "split_backward",
]
