"""zerosim diff: why do two runs differ? Two configurations of one model trained on the same data from the same seed,
every value of both runs held by its name in the model, the first bit where they part, the event in each run that
made it, the cause, and how far each run is from a float64 run.

    from zerosim.diff import diff
    report = diff(TrainConfig(ranks=2, accumulation_steps=2), TrainConfig(ranks=4), steps=10)
    report.identical, report.parting.tensor, report.event_a.text, report.rule, report.cause
    print(report.text()); report.as_json()        # what `zerosim diff --a ... --b ... [--json]` prints

Its files, read in this order:

    _names.py      logical tensors named by the model (parameters, layers, a micro-batch by its place in the step),
                   independent of how a run shards, and the canonical order: step, micro-batch, tensor, element
    _record.py     Recorder: the observer zerosim.train.train takes (nothing is recorded without one), a run's values
                   consolidated by name across ranks, shards and tensor-parallel slices after each step
    _compare.py    the first parting: both runs walked in the canonical order, bit for bit
    _events.py     an event on the way to an element, and which of two chains' events part first
    _chains.py     each kind of tensor's chain of events in one run, as a table
    _reduction.py  a reduced gradient's chain: accumulation, the recipe's division, the ring's hops and partial sums
    _facts.py      what a run is (formats, recipe, ranks, schedule), read from the engine that ran
    _causes.py     the cause, as a table of rules
    _report.py     DiffReport: the parting, events, cause, values beside float64's, the growth; text and JSON
    _diff.py       diff(a, b, steps=None): the runs, the yardstick, the walk and the explanation
"""

from zerosim.diff._causes import RULES, Rule
from zerosim.diff._compare import Parting
from zerosim.diff._diff import diff
from zerosim.diff._events import Event
from zerosim.diff._names import KINDS, Tensor
from zerosim.diff._record import Recorder, StepRecord
from zerosim.diff._report import DiffReport, Growth, Values

__all__ = ["DiffReport", "Event", "Growth", "KINDS", "Parting", "RULES", "Recorder", "Rule", "StepRecord", "Tensor",
           "Values", "diff"]
