"""What every comparison of the parity kit shares: the MLP and its batches on the torch side, the loss, the
distance in ulps, and one step's verdict with its named cause.

The model is `nn.Linear` + ReLU (torch registers its parameters as "0.weight", "0.bias", "2.weight", ...), the
loss zerosim's half-MSE, L = 0.5 * sum((y - t)^2) / B (models/layers/_losses.py: HalfMSE), so that zerosim's own
forward/backward (_own_grads.py) computes the same function. torch is imported by the callers, inside the rank
processes (_launch.py) or once a run has started.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass

# Where a step's first difference from torch arises, in the order the step runs: the name printed beside it.
CAUSES = {
    "local": "matmul order (zerosim's own forward/backward: NumPy's fp32 matmuls sum in another order from torch's "
             "MKL kernels)",
    "reduced": "the reduction's order (zerosim's ring adds in another order from gloo's)",
    "update": "sqrt (torch's CPU sqrt, MKL's vsSqrt, is not correctly rounded on every CPU; zerosim's is)",
    "carried": "the parameters already differed when the step began",
}


@dataclass(frozen=True)
class StepParity:
    """One step's comparison: the fraction of elements whose bits equal torch's, the largest distance in fp32
    ulps (0 where every bit agrees), and `cause`: "" where every bit agrees, else the key in CAUSES of the first
    stage of the step whose values differed from torch's ("local", "reduced", "update", "carried")."""

    step: int
    equal: float
    max_ulps: int
    cause: str = ""

    @property
    def reason(self) -> str:
        """The named cause of a difference, in words ("" for none)."""
        return CAUSES.get(self.cause, self.cause)


def torch_model(torch, widths, seed: int):
    """The torch MLP: Linear layers of `widths`, ReLU between them, initialised by torch from `seed`."""
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def torch_batch(torch, widths, seed: int, step: int, rank: int, batch: int):
    """Rank `rank`'s (x (B, D_in), target (B, D_out)) fp32 batch at `step`, the same on every run."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    return torch.randn(batch, widths[0], generator=g), torch.randn(batch, widths[-1], generator=g)


def torch_half_mse(y, target):
    """zerosim's half-MSE in torch: 0.5 * sum((y - t)^2) / B, in fp32 whatever y's dtype (a bf16 output is
    promoted by the subtraction of an fp32 target)."""
    return ((y - target) ** 2).sum() * (0.5 / y.shape[0])


def ordered(x: np.ndarray) -> np.ndarray:
    """fp32 values as integers in the order of the numbers they encode (-0.0 and +0.0 both 0): a difference of
    these is a distance in ulps."""
    i = np.asarray(x, np.float32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def same_bits(a: dict, b: dict) -> bool:
    """True when every array of `a` has the bits of `b`'s array of the same name."""
    def bits(x):
        return np.asarray(x, np.float32).view(np.uint32)

    return all(np.array_equal(bits(a[k]), bits(b[k])) for k in b)


def step_parity(step: int, mine: dict, theirs: dict, cause: str = "") -> StepParity:
    """`mine` against `theirs` ({name: fp32 array}, torch's names and order): the fraction of bitwise-equal
    elements and the largest ulp distance; `cause` is kept only where some bits differ."""
    a = np.concatenate([np.asarray(mine[k], np.float32).reshape(-1) for k in theirs])
    b = np.concatenate([np.asarray(theirs[k], np.float32).reshape(-1) for k in theirs])
    equal = a.view(np.uint32) == b.view(np.uint32)
    ulps = int(np.abs(ordered(a) - ordered(b)).max(initial=0))
    return StepParity(step, float(equal.mean()), ulps, "" if equal.all() else cause)


def first_difference(stages: list) -> str:
    """The key of the first (key, mine, theirs) stage whose arrays differ in any bit, "" if none does."""
    for key, mine, theirs in stages:
        if not same_bits(mine, theirs):
            return key
    return ""
