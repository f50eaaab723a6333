"""Tiny models with explicit forward/backward pairs, layer by layer, and the driver engines call.

    layers   Layer, Linear, ReLU, GELU (+ the plain *_forward / *_backward functions)
    losses   Loss, HalfMSE ("mse"), SoftmaxCrossEntropy ("xent")
    model    Model, ParamSpec: layer list, flat parameter layout, checkpoint blocks
    tinynet  TinyNet: seed 004's four-weight network;  mlp  MLP
    run      forward_backward (hooks + checkpointing + ledger), loss_and_grad, predict
    data     make_regression, make_classification (random-teacher tasks)
"""

from zerosim.models.data import make_classification, make_regression
from zerosim.models.layers import (GELU, Layer, Linear, ReLU, acc_dtype, gelu_backward, gelu_forward, linear_backward,
                                   linear_forward, relu_backward, relu_forward)
from zerosim.models.losses import HalfMSE, Loss, SoftmaxCrossEntropy, get_loss
from zerosim.models.mlp import MLP
from zerosim.models.model import Model, ParamSpec
from zerosim.models.run import forward_backward, loss_and_grad, predict
from zerosim.models.tinynet import TinyNet

__all__ = [
    "GELU", "HalfMSE", "Layer", "Linear", "Loss", "MLP", "Model", "ParamSpec", "ReLU", "SoftmaxCrossEntropy", "TinyNet",
    "acc_dtype", "forward_backward", "gelu_backward", "gelu_forward", "get_loss", "linear_backward", "linear_forward",
    "loss_and_grad", "make_classification", "make_regression", "predict", "relu_backward", "relu_forward",
]
