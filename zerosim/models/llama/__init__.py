"""The Llama family (Hugging Face's LlamaForCausalLM; Mistral and Qwen2 by their configs): a token embedding, decoder
layers of RMSNorm, grouped-query attention with rotary embeddings and a SwiGLU MLP, a final RMSNorm and the LM head.
Its files pair with the GPT family's (models/gpt/):

    _model.py      Llama: the units in order, their checkpoint blocks      (gpt/_model.py: GPT)
    _embedding.py  TokenEmbedding: no position table (RoPE)                (gpt/_embedding.py)
    _block.py      LlamaBlock: attention then MLP, one ZeRO unit           (gpt/_block.py: TransformerBlock)
    _attention.py  LlamaAttention: GQA, repeat_kv, RoPE                    (gpt/_attention.py: AttentionBlock)
    _mlp.py        SwiGLUFFN: gate, up, SiLU, down                         (gpt/_mlp.py: FFNBlock)
    _head.py       LlamaHead: the final RMSNorm and lm_head                (gpt/_head.py: LMHead)
    _meta.py       MetaLlama: the data-less twin for the meta backend      (gpt/_meta.py: MetaGPT)
"""

from zerosim.models.llama._attention import (
    LlamaAttention,
    check_gqa,
    norm_qkv_backward,
    norm_qkv_forward,
    repeat_kv,
    repeat_kv_backward,
)
from zerosim.models.llama._block import LlamaBlock
from zerosim.models.llama._embedding import TokenEmbedding, token_embedding_backward, token_embedding_forward
from zerosim.models.llama._head import LlamaHead
from zerosim.models.llama._meta import MetaLlama
from zerosim.models.llama._mlp import SwiGLUFFN, swiglu_backward, swiglu_forward
from zerosim.models.llama._model import Llama

__all__ = [
    "Llama", "LlamaAttention", "LlamaBlock", "LlamaHead", "MetaLlama", "SwiGLUFFN", "TokenEmbedding", "check_gqa",
    "norm_qkv_backward", "norm_qkv_forward", "repeat_kv", "repeat_kv_backward", "swiglu_backward", "swiglu_forward",
    "token_embedding_backward", "token_embedding_forward",
]
