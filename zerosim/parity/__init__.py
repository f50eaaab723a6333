"""The parity kit: the same training in real torch (N processes on gloo) and in zerosim, compared bit for bit.

    launch.py             N torch processes on gloo running one function (torch imported only when a run starts)
    torch_collectives.py  torch's own all-reduce / reduce-scatter on gloo, on given arrays
    ddp.py                real DDP (its defaults, its own buckets) beside zerosim's `ddp` recipe on gloo, per step

torch is the optional `parity` extra; nothing in zerosim imports this package's torch parts otherwise.
"""

from zerosim.parity.launch import TorchMissing, require_torch, run_on_gloo
from zerosim.parity.torch_collectives import torch_gloo, torch_gloo_calls

__all__ = ["TorchMissing", "require_torch", "run_on_gloo", "torch_gloo", "torch_gloo_calls"]
