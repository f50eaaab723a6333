"""The small dense models: seed 004's four-weight TinyNet and the MLP the property tests draw.

    _tinynet.py   TinyNet: seed 004's network, exactly (its weights and its two GPUs' batches)
    _mlp.py       MLP: Linear/activation pairs, half-MSE or softmax cross-entropy on top
"""

from zerosim.models.mlp._mlp import ACTIVATIONS, MLP
from zerosim.models.mlp._tinynet import TinyNet

__all__ = ["ACTIVATIONS", "MLP", "TinyNet"]
