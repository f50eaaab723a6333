"""The GPT family (GPT-2's layout): token + position embedding, pre-LN blocks of LayerNorm, attention and a GELU
MLP, a final LayerNorm and the LM head. Its files pair with the Llama family's (models/llama/):

    _model.py      GPT: the units in order, their checkpoint blocks        (llama/_model.py: Llama)
    _embedding.py  Embedding: token + position tables                      (llama/_embedding.py)
    _block.py      TransformerBlock: attention then MLP, one ZeRO unit     (llama/_block.py: LlamaBlock)
    _attention.py  AttentionBlock: LN1, W_qkv, attention, W_o, residual    (llama/_attention.py: LlamaAttention)
    _mlp.py        FFNBlock: LN2, W1, GELU, W2, residual                  (llama/_mlp.py: SwiGLUFFN)
    _head.py       LMHead: the final LayerNorm and W_head                  (llama/_head.py: LlamaHead)
    _meta.py       MetaGPT: the data-less twin for the meta backend        (llama/_meta.py: MetaLlama)

What both families share (the Decoder, seed 001's checkpointing strategies) is models/_decoder.py, re-exported here.
"""

from zerosim.models._decoder import (
                                     ALL_STRATEGIES,
                                     CHECKPOINTS,
                                     COMPOSED,
                                     INIT_STD,
                                     STRATEGIES,
                                     UNITS,
                                     Decoder,
                                     check_units,
                                     every_k,
                                     saved_blocks,
                                     strategy_blocks,
                                     strategy_options,
)
from zerosim.models.gpt._attention import AttentionBlock
from zerosim.models.gpt._block import TransformerBlock
from zerosim.models.gpt._embedding import Embedding, embedding_backward, embedding_forward
from zerosim.models.gpt._head import LMHead
from zerosim.models.gpt._meta import MetaGPT
from zerosim.models.gpt._mlp import FFNBlock, pack_mask, unpack_mask
from zerosim.models.gpt._model import GPT

__all__ = [
    "ALL_STRATEGIES", "AttentionBlock", "CHECKPOINTS", "COMPOSED", "Decoder", "Embedding", "FFNBlock", "GPT",
    "INIT_STD", "LMHead", "MetaGPT",
    "STRATEGIES", "TransformerBlock", "UNITS", "check_units", "embedding_backward", "embedding_forward", "every_k",
    "pack_mask", "saved_blocks", "strategy_blocks", "strategy_options", "unpack_mask",
]
