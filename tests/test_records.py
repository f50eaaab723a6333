"""The fast makers of the events a step records thousands of times (a ledger's alloc/free, a Compute) against the
dataclasses' own constructors: the same object, field for field, the same repr, still frozen."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from zerosim.cluster import Compute, LedgerEvent
from zerosim.cluster._events import compute_event
from zerosim.cluster._ledger import ledger_event


@pytest.mark.parametrize("cls, make", [(LedgerEvent, ledger_event), (Compute, compute_event)])
def test_a_maker_takes_every_field_in_order(cls, make):
    # a field added to the class and not to its maker would be missing from every event the engines record
    assert list(inspect.signature(make).parameters) == [f.name for f in dataclasses.fields(cls)]


CASES = [
    (LedgerEvent, ledger_event, (7, "alloc", "fc0.input", "activations", 96, 4096, 512, "forward layer 0", 3)),
    (Compute, compute_event, (1, 2, 0, 4, "fc1", "backward", 1234, 56, 78, (5, 6), {"dx": 1})),
    (Compute, compute_event, (0, 1, 0, -1, "loss", "loss", 4, 8, 8)),  # the defaults left out
]


@pytest.mark.parametrize("cls, make, args", CASES)
def test_the_maker_makes_what_the_class_makes(cls, make, args):
    made, built = make(*args), cls(*args)
    assert type(made) is cls and made == built and repr(made) == repr(built) and hash(made) == hash(built)
    assert dataclasses.asdict(made) == dataclasses.asdict(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.rank = 0
