"""The fast makers of the events a step records thousands of times (a ledger's alloc/free, a Compute) against the
dataclasses' own constructors: the same object, field for field, the same repr, still frozen."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from zerosim.cluster import Compute, LedgerEvent, OptimizerStep
from zerosim.cluster._events import compute_event, optimizer_step_event
from zerosim.cluster._ledger import ledger_event


@pytest.mark.parametrize("cls, make", [(LedgerEvent, ledger_event), (Compute, compute_event),
                                       (OptimizerStep, optimizer_step_event)])
def test_a_maker_takes_every_field_in_order(cls, make):
    # a field added to the class and not to its maker would be missing from every event the engines record
    assert list(inspect.signature(make).parameters) == [f.name for f in dataclasses.fields(cls)]


CASES = [
    (LedgerEvent, ledger_event, (7, "alloc", "fc0.input", "activations", 96, 4096, 512, "forward layer 0", 3)),
    (Compute, compute_event, (1, 2, 0, 4, "fc1", "backward", 1234, 56, 78, (5, 6), {"dx": 1})),
    (Compute, compute_event, (0, 1, 0, -1, "loss", "loss", 4, 8, 8)),  # the defaults left out
    (OptimizerStep, optimizer_step_event, (3, 2, 163, 326, "adam", (7, 9), {"m": 1}, "host")),
    (OptimizerStep, optimizer_step_event, (0, 1, 0, 163, "adam")),  # the defaults left out
]


@pytest.mark.parametrize("cls, make, args", CASES)
def test_the_maker_makes_what_the_class_makes(cls, make, args):
    made, built = make(*args), cls(*args)
    assert type(made) is cls and made == built and repr(made) == repr(built) and hash(made) == hash(built)
    assert dataclasses.asdict(made) == dataclasses.asdict(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.rank = 0


def _zero3_step(keep_values=True, steps=1, **cluster):
    import numpy as np

    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.models import make_regression

    model = MLP([6, 9, 3])
    engine = ZeroEngine(model, Cluster(3, keep_values=keep_values, **cluster), 3, Adam(lr=1e-2), "bf16-mixed",
                        params=model.init_params(np.random.default_rng(1)))
    for _ in range(steps):
        engine.step(make_regression(np.random.default_rng(0), 3, 4, [6, 3]))
    return engine.cluster.trace


def test_an_engine_s_compute_events_read_back_as_the_class_makes_them(tmp_path):
    # the engine records each Compute as its fields (`ComputeFields`: one object for the garbage collector, not two);
    # every way of reading the log gives the Compute the class makes from those fields, field for field
    from zerosim.cluster import Compute, GradClip
    from zerosim.cluster._events import ComputeFields

    trace = _zero3_step()
    raw = [e for e in trace._log if type(e) is ComputeFields]
    assert len(raw) == 3 * 7  # three ranks, seven ops: two Linear and a ReLU forward, the loss, three backward
    assert trace.of_type(GradClip) == [] and all(type(e) is ComputeFields for e in raw)  # other kinds left as they are
    built = [Compute(*fields) for fields in raw]
    computes = trace.of_type(Compute)
    assert computes == built and [repr(e) for e in computes] == [repr(e) for e in built]
    assert all(a.values is b.values for a, b in zip(computes, built))  # `values` is not compared by ==
    fresh = _zero3_step(keep_values=False).log  # read whole, before any `of_type`: the log never shows the fields
    assert sum(type(e) is Compute for e in fresh) == 3 * 7 and not any(type(e) is ComputeFields for e in fresh)
    path = tmp_path / "log.txt"
    # the first step written as it folds out of a one-step window (its entries as recorded), the second at the flush
    streamed = _zero3_step(keep_values=False, steps=2, log_to=str(path), keep_steps=1)
    first = [line for line in path.read_text().splitlines() if line.startswith("Compute(")]
    streamed.flush_log()
    second = [repr(e) for e in streamed.of_type(Compute)]
    assert len(first) == 3 * 7 and all(", step=1," in line for line in first)
    assert [line for line in path.read_text().splitlines() if line.startswith("Compute(")] == first + second
