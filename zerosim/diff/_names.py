"""Logical tensors: the values every run of one model holds in common, named by the model itself.

A run's arrays live in its own layout (flat shards, per-parameter chunks, tensor-parallel slices); a logical
tensor is the same value in the model's order, named by the whole model's parameters and layers, so two runs
that shard differently (another rank count, stage, recipe, tensor-parallel degree — later pipeline stages or context
shards) are compared name by name. The canonical order walks a run the way its values are born:

    step 0   before any micro-batch   params, master                the weights the run starts from
    step s   before any micro-batch   loss scale                    S of this step
             each micro-batch g       input, target                 the data (g: its place among the step's N·K)
                                      out  (per layer, forward)     the activations (a whole-model run's only)
                                      loss
                                      grad (per parameter, backward order)   the local gradient, loss-scaled
             after the micro-batches  reduced (per parameter)       the reduced gradient as the recipe keeps it
                                      grad32 (per parameter)        averaged, unscaled, clipped: what the optimizer
                                                                    reads
                                      state:<name> (per parameter)  the optimizer's intermediates (m, v, ...), in
                                                                    the order it makes them
                                      stored:<name> (per parameter) its state as kept between steps (its format)
                                      master, params (per parameter)  the new weights

Micro-batch g is the g-th of the step's micro-batches in the order the data is drawn (train's pool), whichever rank
ran it: rank r's j-th micro-batch is g = dp_position(r)·K + j (zerosim.train). Letters: P parameters, K micro-batches
per rank, G = N·K micro-batches a step.
"""

from __future__ import annotations

from zerosim._dataclass import dataclass

BEFORE, AFTER = -1, 1 << 30  # the micro-batch slots of a step's first and last tensors

# kind -> (its slot: BEFORE, "micro" or AFTER; what a person calls it; whether it is per parameter)
KINDS = {
    "params": (BEFORE, "compute-format params", True),
    "master": (BEFORE, "master weights", True),
    "loss scale": (BEFORE, "loss scale", False),
    "input": ("micro", "input", False),
    "target": ("micro", "target", False),
    "out": ("micro", "activation", False),
    "loss": ("micro", "loss", False),
    "grad": ("micro", "local gradient", True),
    "reduced": (AFTER, "reduced gradient", True),
    "grad32": (AFTER, "averaged gradient", True),
    "state": (AFTER, "optimizer", True),
    "stored": (AFTER, "optimizer state as stored", True),
    "new master": (AFTER, "new master weights", True),
    "new params": (AFTER, "new compute-format params", True),
}
STEP_START = ("params", "master", "loss scale")
MICRO = ("input", "target", "out", "loss", "grad")
STEP_END = ("reduced", "grad32", "state", "stored", "new master", "new params")


@dataclass(frozen=True)
class Param:
    """One parameter of the whole model: its logical name ("fc1.w", "block0.w_qkv") and place in the (P,) vector."""

    name: str
    layer: int
    offset: int
    size: int
    shape: tuple


def params_of(model) -> tuple:
    """The whole model's parameters by name, in its flat order."""
    return tuple(Param(f"{model.layers[s.layer].name}.{s.name}", s.layer, s.offset, s.size, tuple(s.shape))
                 for s in model.specs)


def backward_order(params: tuple) -> tuple:
    """The parameters in the order backward makes their gradients: the last layer first."""
    return tuple(sorted(params, key=lambda p: -p.layer))


@dataclass(frozen=True)
class Tensor:
    """A logical tensor's key: where it is born in the canonical order and what it is called."""

    step: int
    slot: int  # BEFORE, a micro-batch g, or AFTER
    kind: str  # one of KINDS
    name: str  # a parameter's or layer's name, an optimizer state's ("m"), or "" for one value a micro-batch

    def describe(self) -> str:
        """E.g. "step 1, micro-batch 0, local gradient of fc1.w"."""
        what = KINDS[self.kind][1]
        where = {BEFORE: "before its micro-batches" if self.step else "at the start",
                 AFTER: "after its micro-batches"}.get(self.slot, f"micro-batch {self.slot}")
        if self.kind in ("state", "stored"):
            state, _, param = self.name.partition(" ")
            thing = f"optimizer {'state' if self.kind == 'state' else 'state as stored'} {state} of {param}"
        elif self.kind == "out":
            thing = f"activation out of {self.name}"
        else:
            thing = f"{what} of {self.name}" if self.name else what
        return f"step {self.step}, {where}: {thing}"

    def as_json(self) -> str:
        return f"{self.kind}:{self.name}" if self.name else self.kind
