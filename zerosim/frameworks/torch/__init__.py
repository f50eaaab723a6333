"""The parity kit: the same training in real torch (N processes on gloo) and in zerosim, compared bit for bit.

    _launch.py       N torch processes on gloo running one function (torch imported only when a run starts)
    _collectives.py  torch's own all-reduce / reduce-scatter on gloo, on given arrays
    _common.py       what every comparison shares: the MLP and its batches on the torch side, bit comparisons
    _ddp.py          real DDP (its defaults, its own buckets) beside zerosim's `ddp` recipe, step by step
    _zero1.py        DDP + ZeroRedundancyOptimizer (Adam inside) beside zerosim's ZeRO-1
    _fsdp.py         FSDP2 `fully_shard` beside zerosim's `fsdp2` recipe
    _kits.py         the comparisons beyond DDP in one launch
    _own_grads.py    zerosim's own forward/backward on torch's parameter names
    _sqrt.py         zerosim's Adam with torch's CPU sqrt substituted

torch is the optional `parity` extra; nothing in zerosim imports torch otherwise (each run imports it when it starts).
"""

from zerosim.frameworks.torch._collectives import torch_gloo, torch_gloo_calls
from zerosim.frameworks.torch._common import (
    StepParity,
    first_difference,
    ordered,
    same_bits,
    step_parity,
    torch_batch,
    torch_half_mse,
    torch_model,
)
from zerosim.frameworks.torch._ddp import compare_ddp, run_torch_ddp
from zerosim.frameworks.torch._fsdp import compare_fsdp, dim0_rows, fsdp_reduce
from zerosim.frameworks.torch._kits import ranks_of, run_torch_kits
from zerosim.frameworks.torch._launch import TorchMissing, require_torch, run_on_gloo
from zerosim.frameworks.torch._own_grads import local_gradients
from zerosim.frameworks.torch._sqrt import TorchSqrtAdam
from zerosim.frameworks.torch._zero1 import compare_zero1, zero_redundancy_partition

__all__ = [
    "StepParity", "TorchMissing", "TorchSqrtAdam", "compare_ddp", "compare_fsdp", "compare_zero1", "dim0_rows",
    "first_difference", "fsdp_reduce", "local_gradients", "ordered", "ranks_of", "require_torch", "run_on_gloo",
    "run_torch_ddp", "run_torch_kits", "same_bits", "step_parity", "torch_batch", "torch_gloo", "torch_gloo_calls",
    "torch_half_mse", "torch_model", "zero_redundancy_partition",
]
