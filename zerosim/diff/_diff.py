"""`diff(a, b)`: two configurations of one model trained on the same data from the same seed, their logical checkpoints
compared in the canonical order, the first parting explained, and how far each run is from a float64 run.

    report = diff(TrainConfig(ranks=2, accumulation_steps=2, steps=10), TrainConfig(ranks=4, steps=10))
    report.identical, report.parting.tensor, report.event_a.text, report.cause
    print(report.text())

Each run is `zerosim.train.train` with a `Recorder` (_record.py) watching it; the yardstick is the same configuration on
one rank in float64 (precision "fp64", its N·K micro-batches accumulated on the one rank, so it reads the same data:
the oracle's float64 check, DESIGN.md), run once where both configurations have the same one.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.diff._causes import cause
from zerosim.diff._chains import CHAINS
from zerosim.diff._compare import first_parting, value_of
from zerosim.diff._events import Event, parting_events
from zerosim.diff._names import AFTER
from zerosim.diff._facts import facts_of
from zerosim.diff._record import Recorder
from zerosim.diff._report import DiffReport, Growth, Values, growth_of
from zerosim.train import TrainConfig, run_model, train

# what a run under diff may not do: it runs in memory, on the simulator, from the start
REFUSED = {"save": "--save", "resume": "--resume", "trace_log": "--trace-log", "offload": "--offload-optimizer"}


@dataclass
class Side:
    """One run as the diff holds it: its configuration, its logical checkpoints, its facts and its losses."""

    name: str  # "A", "B" or "float64"
    config: TrainConfig
    recorder: Recorder
    facts: object
    losses: list
    seconds: float


def run(name: str, config: TrainConfig, full: bool = True) -> Side:
    """Train `config` with a recorder watching (`full`: every logical tensor; else the weights after each step)."""
    recorder = Recorder(full)
    start = time.perf_counter()
    result = train(config, observer=recorder, show_progress=False)  # a report's run: `zerosim diff --json` stays quiet
    return Side(name, config, recorder, facts_of(config, recorder.engine), result.losses,
                time.perf_counter() - start)


def check(config: TrainConfig, which: str) -> None:
    """Refuse, naming the flag, what a run under diff cannot do."""
    if not isinstance(config, TrainConfig):
        raise TypeError(f"run {which} must be a zerosim.train.TrainConfig, got {config!r}")
    for field, flag in REFUSED.items():
        if getattr(config, field):
            raise ValueError(f"run {which}: {flag} is not for diff, which trains both runs in memory from the start")
    if config.backend != "numpy":
        raise ValueError(f"run {which}: diff runs both runs on the numpy backend (every rank in this process), "
                         f"not {config.backend!r}")


def same_model(a: TrainConfig, b: TrainConfig) -> None:
    """Refuse two configurations of different models: diff compares one model's runs, parameter by parameter."""
    models = [run_model(c) for c in (a, b)]
    names = [[(s.layer, s.name, s.shape) for s in m.specs] for m in models]
    if names[0] != names[1]:
        vocab = [getattr(getattr(m, "gpt", m), "vocab", None) for m in models]
        padded = f" (tensor parallelism pads the vocabulary as Megatron does: {vocab[0]} rows in run A, {vocab[1]} " \
                 f"in run B — give a --vocab both TP degrees divide)" if vocab[0] != vocab[1] else ""
        raise ValueError(f"runs A and B train different models (their parameters differ: --model, --widths, "
                         f"--d-model, --heads, --layers, --vocab, --length){padded}: diff compares two configurations "
                         f"of one model")


def yardstick(config: TrainConfig) -> TrainConfig:
    """The float64 run beside `config`: one rank, stage 0, every one of its N·K micro-batches on it, in float64."""
    dp = config.ranks // config.tp
    options = {k: v for k, v in config.optimizer_options.items() if k != "formula"}  # a kernel's order is fp32's
    return dataclasses.replace(config, precision="fp64", ranks=1, stage=0, tp=1, sp=False,
                               accumulation_steps=dp * config.accumulation_steps, comm=None, muon_sharding=None,
                               optimizer_options=options)


def diff(a: TrainConfig, b: TrainConfig, steps: int | None = None) -> DiffReport:
    """Train `a` and `b` (each a zerosim.train.TrainConfig; `steps` replaces both their steps) and say where and why
    their bits part, and how far each is from a float64 run (see the module docstring)."""
    check(a, "A")
    check(b, "B")
    if steps is not None:
        a, b = dataclasses.replace(a, steps=steps), dataclasses.replace(b, steps=steps)
    if a.steps != b.steps:
        raise ValueError(f"runs A and B train {a.steps} and {b.steps} steps: give diff --steps once for both")
    same_model(a, b)
    started = time.perf_counter()
    side_a, side_b = run("A", a), run("B", b)
    twin_a, twin_b = yardstick(a), yardstick(b)
    f_a = run("float64", twin_a, full=False)  # its weights after each step: the yardstick of the growth
    f_b = f_a if twin_b == twin_a else run("float64", twin_b, full=False)  # one float64 run where both have the same
    parting, event_a, event_b, why, rule, values = None, None, None, None, None, None
    for step in range(a.steps + 1):
        parting = first_parting(side_a.recorder, side_b.recorder, step, side_a.recorder.params, _layers(side_a),
                                optional=("out",))
        if parting is not None:
            break
    if parting is not None:
        event_a, event_b, rule, why = explain(parting, side_a, side_b)
        values = Values(parting.a, parting.b, float64_value(parting, side_a, f_a), float64_value(parting, side_b, f_b))
    growth = [Growth(**g) for g in growth_of(side_a, side_b, f_a, f_b)]
    return DiffReport(a, b, parting is None, parting, event_a, event_b, rule, why, values, growth,
                      {"A": side_a.seconds, "B": side_b.seconds,
                       "float64": f_a.seconds + (f_b.seconds if f_b is not f_a else 0.0),
                       "diff": time.perf_counter() - started},
                      side_a.facts, side_b.facts, sum(p.size for p in side_a.recorder.params))


def _layers(side) -> tuple:
    return tuple(layer.name for layer in side.recorder.whole.layers)


def explain(parting, side_a: Side, side_b: Side) -> tuple:
    """(run A's event, run B's event, the cause's rule name, its sentence) for a parting."""
    t, i = parting.tensor, parting.index
    param = next((p for p in side_a.recorder.params if t.name.split(" ")[-1] == p.name), None)
    if i is None:  # a tensor one run lacks, or of another shape: its events, without an element
        i = 0
    chains = [_chain(side, t, i, param, value) for side, value in ((side_a, parting.a), (side_b, parting.b))]
    event_a, event_b = parting_events(*chains)
    steps_a, steps_b = side_a.recorder.steps.get(t.step), side_b.recorder.steps.get(t.step)
    events = {e.what for e in (event_a, event_b) if e is not None}
    rule, why = cause(t.kind, events, side_a.facts, side_b.facts, steps_a, steps_b)
    if rule is None:
        rule = "order"
        why = (f"the runs do the same arithmetic in another order: run A's {event_a.what if event_a else 'event'} "
               f"and run B's {event_b.what if event_b else 'event'} form the first different value")
    return event_a, event_b, rule, why


WEIGHTS = {"params": "params", "master": "params", "new master": "new master", "new params": "new master"}


def _chain(side: Side, t, i: int, param, value) -> list:
    """A run's chain of events for element i of tensor t (_chains.py); a step its loss scaler skipped holds nothing
    after its micro-batches, and says so."""
    record = side.recorder.steps.get(t.step)
    if t.slot == AFTER and record is not None and record.skipped:
        d = record.scale
        return [Event("loss scale", f"the loss scaler ({d.scaler}) skipped step {t.step}: an inf or NaN in the reduced "
                                    f"gradient; the scale {d.scale_before:g} -> {d.scale_after:g}, nothing updated",
                      ("skipped", t.step, d.scale_before))]
    return CHAINS[t.kind](side, t, i, param, value)


def float64_value(parting, side: Side, exact: Side):
    """The float64 run's value of the same logical tensor and element, in the run's units (its loss scale S and, for a
    recipe that divides by N before the sum, its 1/N); None where the float64 run holds no such tensor. (Its weights
    were recorded as it ran; any other tensor is recorded by running it again up to the parting step.)"""
    t, i = parting.tensor, parting.index
    if i is None:
        return None
    if t.kind in WEIGHTS:  # float64 has no master: its params are its weights
        t = dataclasses.replace(t, kind=WEIGHTS[t.kind])
    else:
        exact = run("float64", dataclasses.replace(exact.config, steps=max(t.step, 1)))
    record = exact.recorder.steps.get(t.step)
    value = None if record is None else value_of(record, t, exact.recorder.params, _layers(exact))
    if value is None or np.size(value) <= i:
        return None
    x = float(np.asarray(value, dtype=np.float64).reshape(-1)[i])
    scale = side.recorder.steps[t.step].values.get((-1, "loss scale", ""), 1.0)
    if t.kind == "grad":
        x *= scale
    elif t.kind == "reduced":
        x *= scale / (side.facts.dp if side.facts.divides_by_n else 1)
    return x

