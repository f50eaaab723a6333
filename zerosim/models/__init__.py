"""Tiny models with explicit forward/backward pairs, layer by layer, and the driver engines call.

    layers     Layer, Linear, ReLU, GELU (+ the plain *_forward / *_backward functions)
    losses     Loss, HalfMSE ("mse"), SoftmaxCrossEntropy ("xent");  lm_loss  LMCrossEntropy
    model      Model, ParamSpec: layer list, flat parameter layout, checkpoint blocks
    tinynet    TinyNet: seed 004's four-weight network;  mlp  MLP
    run        forward_backward (hooks + checkpointing + ledger), loss_and_grad, predict
    data       make_regression, make_classification (random-teacher tasks)

    transformer pieces (seed 001 §5), each a forward/backward pair:
    embedding  token + position embedding          layernorm   LayerNorm (input and statistics saved)
    attention  causal attention, its softmax       flash_attention   the tiled, memory-efficient twin
    attention_block, ffn, transformer, lm_head     the units: AttentionBlock, FFNBlock, TransformerBlock, LMHead
    gpt        GPT, STRATEGIES (seed 001's checkpointing strategies);  sequence_data  make_sequence_task
    meta_gpt   MetaGPT: the GPT's units as data-less twins, for activations at real scale (meta backend)

    Llama family (Hugging Face's LlamaForCausalLM, Mistral, Qwen2), each piece a forward/backward pair:
    rmsnorm    RMSNorm (fp32 statistics)              rotary      rotary position embeddings
    gqa_attention  LlamaAttention: grouped-query attention, repeat_kv     swiglu  SwiGLUFFN
    llama_block, llama_ends   LlamaBlock; TokenEmbedding, LlamaHead       llama   Llama
    meta_llama MetaLlama: the Llama's data-less twin    hf_config   a config.json read locally (DecoderConfig)
"""

from zerosim.models.attention import (attention_backward, attention_forward, softmax_backward,
                                      softmax_forward)
from zerosim.models.attention_block import AttentionBlock
from zerosim.models.data import make_classification, make_regression
from zerosim.models.embedding import Embedding, embedding_backward, embedding_forward
from zerosim.models.ffn import FFNBlock
from zerosim.models.flash_attention import flash_attention_backward, flash_attention_forward
from zerosim.models.gpt import GPT
from zerosim.models.hf_config import DecoderConfig, read_hf_config, shipped_config, shipped_configs
from zerosim.models.layernorm import layernorm_backward, layernorm_forward
from zerosim.models.layers import (GELU, Layer, Linear, ReLU, acc_dtype, gelu_backward, gelu_forward, linear_backward,
                                   linear_forward, relu_backward, relu_forward)
from zerosim.models.llama import Llama
from zerosim.models.lm_head import LMHead
from zerosim.models.lm_loss import LMCrossEntropy
from zerosim.models.losses import HalfMSE, Loss, SoftmaxCrossEntropy, get_loss
from zerosim.models.mlp import MLP
from zerosim.models.model import Model, ParamSpec
from zerosim.models.run import forward_backward, loss_and_grad, predict
from zerosim.models.sequence_data import answer_positions, make_sequence_task
from zerosim.models.tinynet import TinyNet
from zerosim.models.transformer import TransformerBlock

__all__ = [
    "AttentionBlock", "DecoderConfig", "Embedding", "FFNBlock", "GELU", "GPT", "HalfMSE", "LMCrossEntropy", "LMHead",
    "Layer", "Linear", "Llama",
    "Loss", "MLP", "Model", "ParamSpec", "ReLU", "SoftmaxCrossEntropy", "TinyNet", "TransformerBlock",
    "acc_dtype", "answer_positions", "attention_backward", "attention_forward", "embedding_backward",
    "embedding_forward", "flash_attention_backward", "flash_attention_forward", "forward_backward", "gelu_backward",
    "gelu_forward", "get_loss", "layernorm_backward", "layernorm_forward", "linear_backward", "linear_forward",
    "loss_and_grad", "make_classification", "make_regression", "make_sequence_task", "predict", "read_hf_config",
    "relu_backward", "relu_forward", "shipped_config", "shipped_configs", "softmax_backward", "softmax_forward",
]
