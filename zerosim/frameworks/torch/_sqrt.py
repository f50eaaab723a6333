"""zerosim's Adam with torch's own CPU sqrt substituted: the parity kit's way to take sqrt out of the comparison.

torch.optim.Adam's default path on CPU tensors (`_single_tensor_adam`: foreach and fused default to off unless every
tensor is on CUDA, torch/optim/optimizer.py: _default_to_fused_or_foreach) computes `exp_avg_sq.sqrt()` with
ATen's vectorised CPU sqrt, which an MKL build runs through MKL's vsSqrt (aten/src/ATen/cpu/vml.h). That result is
not correctly rounded on every CPU: on an AMD EPYC (AVX2) with torch 2.13.0+cpu it is one ulp off, either way,
for 19.9 % of uniformly random fp32 inputs in [1, 4) (tests/test_parity_kits.py), and an element gets the same bits
wherever it sits in a tensor (seen at offsets 1 to 1000), so slices of any length may be substituted.
zerosim's Adam(formula="torch") models every other operation of that path (optim/_adam.py), so with torch's sqrt
put in its place (`Adam._sqrt`) the update agrees bit for bit.

The alternative, `torch.optim.Adam(fused=True)` (its CPU kernel takes the hardware's correctly rounded sqrt),
was measured too: it differs from Adam(formula="torch") in the kernel's scalar tail (the elements past the last
full vector, where `exp_avg_sq` is computed in another order: 3 of 601,800 elements in 600 steps), and it is not
the path users run by default — so the kit keeps torch's default and substitutes the sqrt.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.optim import Adam


@dataclass(frozen=True)
class TorchSqrtAdam(Adam):
    """Adam(formula="torch") whose `exp_avg_sq.sqrt()` is torch's own (torch must be installed)."""

    formula: str = "torch"

    def _sqrt(self, v):
        import torch

        return torch.from_numpy(np.ascontiguousarray(v, np.float32)).sqrt().numpy()
