"""MLP: Linear/activation pairs, the last Linear bare, with half-MSE or softmax cross-entropy on top."""

from __future__ import annotations

import numpy as np

from zerosim.models._model import Model
from zerosim.models.layers import GELU, Linear, ReLU, get_loss

ACTIVATIONS = {"relu": ReLU, "gelu": GELU}


class MLP(Model):
    """widths [D_0, ..., D_K]: K Linear layers D_k -> D_{k+1}, each but the last followed by `activation`.

    Layers are named fc0, act0, fc1, act1, ..., fc{K-1}. Checkpoint blocks are the (fc_k, act_k) pairs
    and the last Linear alone, so checkpointing keeps one (B, D_k) input per pair.
    """

    def __init__(self, widths, activation: str = "relu", loss: str = "mse", bias: bool = True):
        if not all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) for w in widths):
            raise ValueError(f"MLP widths must be whole numbers of units, got {list(widths)}")
        widths = [int(w) for w in widths]
        if len(widths) < 2 or min(widths) < 1:
            raise ValueError(f"an MLP needs at least two positive widths [D_in, ..., D_out], got {widths}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {', '.join(ACTIVATIONS)}")
        if not isinstance(bias, (bool, np.bool_)):  # bool("no") is True: a string is refused, not read as yes
            raise ValueError(f"bias must be True or False, got {bias!r}")
        layers, blocks = [], []
        for k, (d_in, d_out) in enumerate(zip(widths[:-1], widths[1:])):
            start = len(layers)
            layers.append(Linear(d_in, d_out, bias=bias, name=f"fc{k}"))
            if k < len(widths) - 2:
                layers.append(ACTIVATIONS[activation](name=f"act{k}"))
            blocks.append((start, len(layers)))
        super().__init__(layers, get_loss(loss), checkpoint_blocks=blocks)
        self.widths, self.activation, self.bias = widths, activation, bias
