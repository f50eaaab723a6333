"""What happened during a step, as typed events: one ordered log the replay, figures, timeline and tests read.

The engine drives a step layer by layer across every local rank; each thing it does lands in
`Trace.log` in the order it happened (the order is deterministic: nothing runs in threads).

    Compute      one layer's forward / recompute / backward (or the loss) on one rank, with its FLOPs
                 and the bytes it read and wrote, and the collective calls it had to wait for
    Call         one collective call over all ranks (its hops are in `Trace.events`, as before), with
                 what it was for: gathering a unit's params, reducing its grads, refreshing params ...
    LedgerEvent  one alloc or free in a rank's ledger (defined in _ledger.py; equal to its timeline's)
    OptimizerStep one rank's update of its region of the flat vector, with the intermediates when kept
    LossScaleUpdate what the loss scaler decided after the overflow check: skip or not, the scale before/after
    GradClip     the global gradient norm every rank agreed on, and the coefficient it scaled the gradient by
    Fp8ScaleUpdate what an fp8 scaling recipe decided for one unit's weights: the amax, the scale before/after

Letters: N ranks, K micro-steps per step (gradient accumulation), t the optimizer step (1-based).
Values (activations, gradients, optimizer intermediates) are copied into events only when the
cluster keeps values (`Cluster(..., keep_values=True)`, small teaching runs); otherwise `values` is None.
"""

from __future__ import annotations

from dataclasses import field

from zerosim._dataclass import dataclass

PASSES = ("forward", "recompute", "backward", "loss")
PURPOSES = (
    "gather params",  # stage 3: a unit's parameters, before its forward, recompute or backward
    "reduce grads",  # the gradients: all-reduce (stage 0), reduce-scatter (1), per unit (2, 3)
    # HSDP / MiCS: a reduced shard all-reduced over its replicas (parallel/data/multinode/_replicate.py)
    "replicate grads",
    "refresh params",  # stage 1/2: the all-gather of the updated 16-bit params after the step
    "optimizer",  # a collective the optimizer itself needs (Muon bringing its matrices together: parallel/data/muon)
    "check",  # a tiny agreement collective (overflow flag, gradient norm)
    "tensor parallel",  # Megatron's f and g inside a layer (parallel/tensor/_communication.py)
    "context parallel",  # the K/V's sends round the CP ring, or their all-gather (parallel/context/_communication.py)
    "",  # a collective called directly, outside an engine
)


@dataclass(frozen=True)
class Compute:
    """One layer's computation on one rank (or the loss): what the timeline charges to the compute stream."""

    rank: int
    # the iteration it belongs to (1-based: engine.iteration + 1 while it runs; t + 1 unless steps were skipped)
    step: int
    micro: int  # micro-step within the step, 0..K-1
    layer: int  # index into model.layers; -1 for the loss
    name: str  # the layer's name ("fc0", "h.3.attn", "loss")
    kind: str  # one of PASSES
    flops: int  # floating-point operations (a multiply-add counts 2)
    bytes_read: int  # inputs + params (+ saved tensors in backward)
    bytes_written: int  # outputs (+ gradients in backward)
    needs: tuple = ()  # the handles it waited for, as Call numbers (stage 3: its unit's gather; trace.Handle)
    values: dict | None = field(default=None, compare=False)  # {"out", "grads", "dx", "loss"} when kept


def compute_event(rank, step, micro, layer, name, kind, flops, bytes_read, bytes_written, needs=(),
                  values=None) -> Compute:
    """`Compute(...)` without the frozen dataclass's `__init__` (one `object.__setattr__` per field): the same
    object, equal and with the same repr, in a third of the time; an engine makes one per op and rank
    (tests/test_records.py keeps the fields in step with the class)."""
    event = _new(Compute)
    event.__dict__.update(rank=rank, step=step, micro=micro, layer=layer, name=name, kind=kind, flops=flops,
                          bytes_read=bytes_read, bytes_written=bytes_written, needs=needs, values=values)
    return event


_new = object.__new__


class ComputeFields(tuple):
    """A `Compute`'s fields in `compute_event`'s order, as an engine records them: one object where the event is two
    (itself and its field dict) for the garbage collector to walk, an engine making one per op and rank. The trace
    makes each its `Compute` the first time the log is read (`Trace.log`), as it does a ledger's plain tuples."""

    __slots__ = ()

    def event(self) -> Compute:
        return compute_event(*self)


@dataclass(frozen=True)
class OptimizerStep:
    """One rank's optimizer update of flat elements [start, stop) (its shard; everything at stage 0)."""

    rank: int
    step: int  # t after the update (1-based)
    start: int
    stop: int
    optimizer: str  # "adam", ...
    needs: tuple = ()  # the handles it waited for, as Call numbers (the last gradient reduction, the checks)
    values: dict | None = field(default=None, compare=False)  # {"grad32", "m", "v", ..., "compute_after"}
    where: str = field(default="device", repr=False)  # the tier it ran on: "device", or "host" (offload's CPU Adam)


def optimizer_step_event(rank, step, start, stop, optimizer, needs=(), values=None, where="device") -> OptimizerStep:
    """`OptimizerStep(...)` without the frozen dataclass's `__init__`, as `compute_event` makes a `Compute`: the same
    object; an engine that steps every rank's small region at once makes one per rank (parallel/data/_update.py;
    tests/test_records.py keeps the fields in step with the class)."""
    event = _new(OptimizerStep)
    event.__dict__.update(rank=rank, step=step, start=start, stop=stop, optimizer=optimizer, needs=needs,
                          values=values, where=where)
    return event


@dataclass(frozen=True)
class StepBoundary:
    """Where a step begins or ends in the log: `what` is "begin" or "end"."""

    step: int
    what: str
    micro_steps: int  # K


@dataclass(frozen=True)
class LossScaleUpdate:
    """The loss scaler's decision at the end of a step's backward, the same on every rank (they agreed on
    `found_inf` through a MAX all-reduce of one flag: `needs`)."""

    step: int  # the iteration (engine.step call, 1-based); skipped iterations take no optimizer step
    t: int  # optimizer steps taken after this decision (unchanged when skipped)
    scaler: str  # "torch", "deepspeed" or "static"
    found_inf: bool  # some rank's reduced gradient held inf or NaN
    skipped: bool  # the update was skipped: masters, optimizer state, t and the 16-bit params unchanged
    scale_before: float  # the scale this step's loss was multiplied by
    scale_after: float  # the scale of the next step
    message: str = ""  # DeepSpeed's "OVERFLOW! ... Skipping step" line, when it has one
    needs: tuple = ()  # the Call number(s) of the flag's all-reduce


@dataclass(frozen=True)
class GradClip:
    """Gradient clipping by global norm: the norm (from a SUM all-reduce of each rank's sum of squares over
    its shard, `needs`) and the coefficient every rank multiplied its gradient by (1.0: left as it was)."""

    step: int  # the iteration (engine.step call)
    norm: float  # the global L2 norm of the unscaled, averaged fp32 gradient
    max_norm: float
    coef: float  # clamp(max_norm / (norm + 1e-6), max=1)
    needs: tuple = ()


@dataclass(frozen=True)
class Fp8ScaleUpdate:
    """An fp8 scaling recipe's decision for one unit's weights (precision/quantize/_fp8_recipes.py), the same on every
    rank: they agreed on the amax through one MAX all-reduce (`needs`)."""

    step: int  # the iteration (engine.step call)
    layer: int  # the unit whose weights it scales
    recipe: str  # "torchao", "current", "delayed"
    role: str  # "forward" (weights) or "backward"
    fmt: str  # the fp8 format of that role
    amax: float  # the amax the new scale came from (0.0: none)
    scale_before: float
    scale_after: float  # a delayed recipe's next step casts with it; the others cast this step with it
    needs: tuple = ()
