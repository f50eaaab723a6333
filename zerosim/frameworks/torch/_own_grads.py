"""zerosim's own forward/backward of the parity kit's MLP, on torch's parameter names: the local gradients a rank
computes when torch's are not substituted.

zerosim's `MLP(widths)` (models/mlp/_mlp.py) is the same function as the torch MLP of _common.py (Linear layers with
bias, ReLU between them, half-MSE): layer fc k is torch's module 2k, its "w" (D_out, D_in) torch's "2k.weight",
its "b" torch's "2k.bias". The arithmetic is zerosim's: the matmuls accumulate in the format's accumulator
(models/layers/_basic.py: linear_forward, linear_backward) through NumPy, torch's run on its MKL kernels in fp32 (or
bf16), so the bits may differ — the "matmul order" the kit names.
"""

from __future__ import annotations

import numpy as np

from zerosim.models import MLP, loss_and_grad


def torch_names(widths) -> list:
    """[(torch name, zerosim layer index, zerosim parameter name)] in torch's registration order."""
    out = []
    for k in range(len(widths) - 1):
        out += [(f"{2 * k}.weight", 2 * k, "w"), (f"{2 * k}.bias", 2 * k, "b")]
    return out


def local_gradients(widths, params: dict, x: np.ndarray, target: np.ndarray, fmt: str = "fp32") -> dict:
    """One rank's gradients by zerosim's forward/backward in `fmt`: params {torch name: fp32 array} (cast to
    `fmt` once, as FSDP's all-gather of `param_dtype` copies does), x (B, D_in), target (B, D_out). Returns
    {torch name: flat gradient in `fmt`}."""
    model = MLP(list(widths))
    flat = np.zeros(model.num_params, np.float32)  # (P,) fp32, zerosim's flat order
    names = torch_names(widths)
    for name, layer, key in names:
        model.unflatten(flat, layer)[key][...] = np.asarray(params[name], np.float32).reshape(
            model.layers[layer].param_shapes[key])
    _, grads = loss_and_grad(model, flat, x, target, fmt)  # (P,) in fmt
    return {name: model.unflatten(grads, layer)[key].reshape(-1).copy() for name, layer, key in names}
