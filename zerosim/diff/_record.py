"""Logical checkpoints: a run's values after each step in the model's order, recorded by watching `zerosim.train`.

`Recorder` is the observer `train(config, observer=...)` takes: it asks the cluster for a trace that keeps values
(the `Compute` and `OptimizerStep` events then carry what each op made, cluster/_events.py) and, after every step,
reads that step's events and consolidates them by name (_names.py): each rank's micro-batches by their place among
the step's micro-batches, each rank's region of the flat vector by the layout's `unarrange`, each tensor-parallel
slice by the slicing rules' `whole_flat`. Nothing is recorded, and nothing costs, unless a recorder is given.

Letters: P the whole model's parameters, P_l a tensor-parallel rank's, Ψ the padded flat length, G micro-batches a step.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import field

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.cluster import Call, Compute, GradClip, LossScaleUpdate, OptimizerStep
from zerosim.diff._names import AFTER, BEFORE, Param, params_of

REDUCING = ("reduce grads", "replicate grads")  # the Calls whose sums make the reduced gradient (cluster/_events.py)
NOT_STATE = ("grad32", "reduced", "master", "compute_after", "params_held")  # OptimizerStep values that are no state


@dataclass
class StepRecord:
    """One step of one run, in the model's order (see _names.py for the kinds)."""

    step: int
    flats: dict = field(default_factory=dict)  # (slot, kind) -> (P,) array, kind "grad", "reduced", "state:m", ...
    values: dict = field(default_factory=dict)  # (slot, kind, name) -> array or float: data, activations, loss, S
    states: tuple = ()  # the optimizer's intermediates' names, in the order it made them
    stored: tuple = ()  # the names of its state as kept between steps
    tp_forward: dict = field(default_factory=dict)  # micro-step -> (("unit", name) | ("call", Call), ...) in order
    calls: tuple = ()  # the step's reducing `Call`s (purpose "reduce grads" / "replicate grads")
    clip: object = None  # its GradClip event, or None
    scale: object = None  # its LossScaleUpdate event, or None (a static scale)
    skipped: bool = False  # the loss scaler skipped the update: no reduced-and-after tensors
    placement: tuple = ()  # ((rank, dp position, tp position, (g, ...)), ...): who ran which micro-batches


class Recorder:
    """The observer that records a run's logical checkpoints (`zerosim.train.train(config, observer=Recorder())`).

    `steps`: {step: StepRecord} (step 0: the weights it starts from); `params`: the whole model's parameters by name;
    `engine`, `tensor`: the run's ZeroEngine and TensorParallel (None without one), for the explanation's facts;
    `layer_ends`: {a tensor-parallel unit: the whole-model layer whose output it hands on} ({} without TP)."""

    def __init__(self, full: bool = True):
        # full: every logical tensor, from a trace that keeps each op's values; else only the weights after each step,
        # read from the engine (what the float64 yardstick's growth needs), at no cost to the run's own ops
        self.full = full
        self.cluster_options = {"keep_values": True} if full else {}
        self.steps, self.engine, self.tensor, self.params = {}, None, None, ()

    # -- the observer's two calls (zerosim/train/_trainer.py) --------------------------------------------------------
    def start(self, engine, tensor) -> None:
        self.engine, self.tensor = engine, tensor
        self.whole = engine.model if tensor is None or tensor.local is None else tensor.full
        self.params = params_of(self.whole)
        # a TP run's activations where a unit ends a whole-model layer; none with sequence parallelism (its units hand
        # on sequence shards, and partial sums before their reduce-scatter)
        self.layer_ends = {} if not self._sliced or tensor.sequence_parallel else _layer_ends(self.whole, tensor.local)
        first = StepRecord(0)
        first.flats[BEFORE, "params"] = self._weights("params")
        if engine.precision.master_format is not None:
            first.flats[BEFORE, "master"] = self._weights("master")
        self._scale = float(engine.scaler.scale)
        self.steps[0] = first

    def _weights(self, buffer: str) -> np.ndarray:
        """The engine's whole (P,) params or master (a pure run's: its params widened), joined from its ranks."""
        engine = self.engine
        if not self._sliced:
            return np.array(engine.full_params() if buffer == "params" else engine.full_master())
        held = None if buffer == "params" else engine.master_shards()
        return np.array(self.tensor.whole_params(engine.ctx, held, buffer))

    def step(self, step: int, engine, since: int, ids: list, batches: list) -> None:
        """Record step `step` from the trace since log position `since` (the weights only unless `full`)."""
        if not self.full:  # the weights only
            record = self.steps[step] = StepRecord(step)
            record.flats[AFTER, "new master"] = self._weights("master")
            record.flats[AFTER, "new params"] = self._weights("params")
            return
        record = StepRecord(step)
        ranks = engine.cluster.ranks
        tp = engine.dims.groups("tp")
        where = {r.index: (i, tp.position(r.index)) for i, r in enumerate(ranks)}
        record.placement = tuple((r.index, engine.dims.groups("dp").position(r.index), where[r.index][1],
                                  tuple(ids[i])) for i, r in enumerate(ranks))
        self._record_data(record, where, ranks, ids, batches)
        grads, regions, calls, states, forward = self._read_log(record, engine.cluster.trace, since, where, ids,
                                                               ranks[0].index)
        stored = self._record_after(record, engine, where, grads, regions)
        record.stored = tuple(stored)
        record.states, record.calls = states, tuple(calls)
        record.tp_forward = {k: tuple(v) for k, v in forward.items()}
        record.skipped = record.scale is not None and record.scale.skipped
        self._scale = float(engine.scaler.scale)  # the next step's S
        self.steps[step] = record

    def _record_data(self, record: StepRecord, where: dict, ranks, ids: list, batches: list) -> None:
        """The loss scale the step starts with, and each micro-batch's input and target (from one rank of each TP
        group)."""
        record.values[BEFORE, "loss scale", ""] = self._scale
        for i, row in enumerate(ids):  # the data, from one rank of each TP group
            if where[ranks[i].index][1] == 0:
                for j, g in enumerate(row):
                    x, target = batches[i][j]
                    record.values[g, "input", ""], record.values[g, "target", ""] = np.array(x), np.array(target)

    def _read_log(self, record: StepRecord, trace, since: int, where: dict, ids: list, first: int):
        """The step's events read once, in order: each micro-batch's activations, loss and local gradient, each rank's
        optimizer region, the reducing calls, a sliced run's forward as rank `first` ran it; returns (grads, regions,
        calls, states, forward)."""
        grads = defaultdict(dict)  # g -> {tp position: (P_l,) local gradient}
        regions = defaultdict(dict)  # value name -> {tp position: (Ψ,) array}
        calls, states = [], ()
        forward = defaultdict(list)  # micro-step -> its forward's units and tensor-parallel calls (sliced runs)
        ended = set()  # the micro-steps whose forward (up to the loss) is over
        for e in trace.log[since - trace.folded.log:]:
            kind = type(e)
            if kind is Compute and e.values is not None:
                i, position = where[e.rank]
                g = ids[i][e.micro]
                if e.kind == "forward" and not self._sliced:
                    record.values[g, "out", e.name] = _plain(e.values["out"])
                elif e.kind == "forward" and e.name in self.layer_ends and not isinstance(e.values["out"], dict):
                    record.values[g, "out", self.layer_ends[e.name]] = np.array(e.values["out"])  # a whole layer's end
                if self._sliced and e.rank == first and e.kind in ("forward", "loss") and e.micro not in ended:
                    forward[e.micro].append(("unit", self.layer_ends.get(e.name, e.name)))
                    ended |= {e.micro} if e.kind == "loss" else set()
                if e.kind == "loss" and position == 0:
                    record.values[g, "loss", ""] = float(e.values["loss"])
                elif e.kind == "backward" and e.values["grads"]:
                    self._keep_grads(grads[g], position, e.layer, e.values["grads"])
            elif kind is OptimizerStep and e.values is not None:
                position = where[e.rank][1]
                states = tuple(k for k in e.values if k not in NOT_STATE)
                for name in ("reduced", "grad32", *states, "master", "compute_after"):
                    if name in e.values:
                        self._place(regions[name], position, e.start, e.stop, e.values[name])
            elif kind is Call and e.purpose in REDUCING:
                calls.append(e)
            elif kind is Call and e.purpose == "tensor parallel" and e.op != "gather" and e.micro not in ended:
                forward[e.micro].append(("call", e))
            elif kind is GradClip:
                record.clip = e
            elif kind is LossScaleUpdate:
                record.scale = e
        return grads, regions, calls, states, forward

    def _record_after(self, record: StepRecord, engine, where: dict, grads, regions) -> dict:
        """The whole (P,) vectors joined from the parts: each micro-batch's gradient, what the optimizer read and
        wrote, and the state each rank stores between steps; returns the stored state's parts by name."""
        ranks = engine.cluster.ranks
        for g, parts in grads.items():
            record.flats[g, "grad"] = self._join(parts)
        names = {"reduced": "reduced", "grad32": "grad32", "master": "new master", "compute_after": "new params"}
        for name, parts in regions.items():
            layout = engine.ctx.layout
            joined = self._join({p: np.array(layout.unarrange(a)) for p, a in parts.items()})
            record.flats[AFTER, names.get(name, f"state:{name}")] = joined
        layout = engine.ctx.layout
        stored = defaultdict(dict)  # the optimizer's state as each rank keeps it between steps
        for r in ranks if regions else ():  # (a skipped step changes no state)
            region = engine.plan.region(layout, r.index)
            for name, buf in r.optim.items():
                self._place(stored[name], where[r.index][1], region.start, region.stop, buf.array)
        for name, parts in stored.items():
            record.flats[AFTER, f"stored:{name}"] = self._join({p: np.array(layout.unarrange(a))
                                                                for p, a in parts.items()})
        return stored

    # -- consolidation by name ----------------------------------------------------------------------------------------
    @property
    def _sliced(self) -> bool:
        return self.tensor is not None and self.tensor.local is not None

    def _keep_grads(self, parts: dict, position: int, layer: int, grads: dict) -> None:
        """Layer `layer`'s gradients into TP position `position`'s (P_l,) vector of this micro-batch."""
        model = self.engine.model
        flat = parts.get(position)
        if flat is None:
            dtype = next(iter(grads.values())).dtype
            flat = parts[position] = np.zeros(model.num_params, dtype)
        a, b = model.layer_window(layer)
        flat[a:b] = model.pack(layer, grads)

    def _place(self, parts: dict, position: int, start: int, stop: int, values) -> None:
        """A rank's region [start, stop) of the padded flat vector into its TP position's (Ψ,) array."""
        flat = parts.get(position)
        if flat is None:
            flat = parts[position] = np.zeros(self.engine.ctx.layout.padded, np.asarray(values).dtype)
        flat[start:stop] = values

    def _join(self, parts: dict) -> np.ndarray:
        """The whole model's (P,) vector from each TP position's (P_l,) one (itself without tensor parallelism)."""
        if not self._sliced:
            return parts[0]
        from zerosim.parallel.tensor import whole_flat

        return whole_flat(self.tensor.local, [parts[p] for p in range(self.tensor.tp)], self.tensor.full)


def _layer_ends(whole, local) -> dict:
    """{tensor-parallel unit name: the whole-model layer it ends}: the last unit of each layer (named the layer or
    "<layer>.<part>"), whose output is the layer's (Megatron cuts a block at its collectives: parallel/tensor)."""
    ends = {}
    for layer in whole.layers:
        units = [u.name for u in local.layers if u.name == layer.name or u.name.startswith(layer.name + ".")]
        if units:
            ends[units[-1]] = layer.name
    return ends


def _plain(value):
    """An activation as an array (tensor parallelism's bundles are not recorded: _names.py)."""
    return np.array(value) if not isinstance(value, dict) else {k: np.array(v) for k, v in value.items()}


def param_view(flat: np.ndarray, param: Param) -> np.ndarray:
    """Parameter `param`'s values in a (P,) vector, flat."""
    return flat[param.offset: param.offset + param.size]
