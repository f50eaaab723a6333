"""The single-device oracle: what every ZeRO stage and strategy must equal, bit for bit.

    _oracle.py        Reference: one device computes each micro-batch's gradient the engines' way, reduces them in
                      the ring's order and dtypes (the naive twin), and runs the same optimizer
    _mesh_reduce.py   its side of HSDP and MiCS: gradients reduced in two levels, in the engines' order
    _wire.py          its side of a quantized gather: the weights a unit computes with, quantized the engines' way
    _qgz.py           QgzReference: the oracle with DeepSpeed's qgZ in its gradient reduction
    _stale.py         StaleReference: the oracle of offload's DPU, the same one-step stale update
    _tensor.py        TensorReference: tensor (and sequence) parallelism's slices on one device, their partial sums
                      in the ring's order, each slice reduced over its data-parallel ranks as Reference does
    _context.py       ContextReference: context parallelism's sequence shards on one device, with its own plain ring
                      attention (and all-gather), their gradients reduced over dp × cp as Reference does
    _pipeline.py      PipelineReference: every micro-batch through the whole model on one device, its gradient cut
                      into the stages', each stage a Reference over its data-parallel ranks in the schedule's order

The worked examples moved to zerosim.replay; its old names here (replay, replay_live, narrate) still answer, with a
warning, until the old import paths go (zerosim/_compat.py REMOVAL).
"""

import warnings

from zerosim._compat import REMOVAL, REMOVED_IN
from zerosim.reference._context import ContextReference
from zerosim.reference._mesh_reduce import reduce_on_mesh
from zerosim.reference._oracle import Reference
from zerosim.reference._pipeline import PipelineReference
from zerosim.reference._qgz import QgzReference
from zerosim.reference._stale import StaleReference
from zerosim.reference._tensor import TensorReference
from zerosim.reference._wire import WireOracle

__all__ = ["ContextReference", "PipelineReference", "QgzReference", "Reference", "StaleReference", "TensorReference",
           "WireOracle", "reduce_on_mesh"]

_MOVED = ("replay", "replay_live", "narrate")


def __getattr__(name):  # PEP 562: the replay's old home, until the old import paths go
    if name in _MOVED:
        warnings.warn(f"zerosim.reference.{name} moved to zerosim.replay.{name}; the old name goes in release "
                      f"{REMOVED_IN} or on {REMOVAL}", DeprecationWarning, stacklevel=2)
        import zerosim.replay

        return getattr(zerosim.replay, name)
    raise AttributeError(f"module 'zerosim.reference' has no attribute {name!r}")
