"""What `zerosim diff` reports: the first parting and its two events, the cause, the two values beside float64's, and
how the difference grows over the steps with each run's distance to the float64 run as the yardstick; as text and as
JSON (`identical`, and when the runs part `first_step`, `tensor`, `index`, `event_a`, `event_b`, `cause`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.diff._facts import LABELS
from zerosim.diff._names import AFTER, BEFORE
from zerosim.precision import get_format, ulp
from zerosim.prose import wrap


@dataclass(frozen=True)
class Values:
    """The parting element in each run, and the float64 run's value of it in each run's units (None: none)."""

    a: object
    b: object
    float64_a: float | None
    float64_b: float | None


@dataclass(frozen=True)
class Growth:
    """One step's difference between the runs' update-format weights (the master, or a pure run's params widened),
    and each run's distance to the float64 run's."""

    step: int
    loss_a: float
    loss_b: float
    ulps: float  # the median |A - B| of the weights that differ, in units of the last place (of the narrower update
    #              format) at B: how many roundings apart a typical parted weight is
    differing: int  # how many weights differ
    rel_error: float  # ||A - B|| / ||B|| (L2)
    a_to_float64: float  # ||A - F|| / ||F||
    b_to_float64: float


def _weights(side, step: int) -> np.ndarray:
    """The update-format weights after `step` (a skipped step's: the ones before it)."""
    steps = side.recorder.steps
    for s in range(step, 0, -1):
        found = steps[s].flats.get((AFTER, "new master")) if s in steps else None
        if found is not None:
            return np.asarray(found, np.float64)
    first = steps[0].flats
    return np.asarray(first.get((BEFORE, "master"), first[BEFORE, "params"]), np.float64)


def growth_of(a, b, fa, fb) -> list:
    """Each step's Growth fields (a dict per step), from the four runs' recorders."""
    narrow = min((get_format(a.facts.update), get_format(b.facts.update)), key=lambda f: f.bits)
    rows = []
    for step in range(1, len(a.losses) + 1):
        wa, wb, xa, xb = (_weights(s, step) for s in (a, b, fa, fb))
        gap = np.abs(wa - wb)
        parted = gap != 0
        ulps = gap[parted] / ulp(wb[parted], narrow)
        rows.append(dict(step=step, loss_a=a.losses[step - 1], loss_b=b.losses[step - 1],
                         ulps=float(np.median(ulps)) if ulps.size else 0.0, differing=int(np.count_nonzero(gap)),
                         rel_error=_rel(wa - wb, wb), a_to_float64=_rel(wa - xa, xa), b_to_float64=_rel(wb - xb, xb)))
    return rows


def _rel(d: np.ndarray, ref: np.ndarray) -> float:
    norm = float(np.linalg.norm(ref))
    return float(np.linalg.norm(d)) / norm if norm else float(np.linalg.norm(d))


@dataclass
class DiffReport:
    """Where and why two runs part (see the module docstring); `text()` and `as_json()` say it."""

    a: object  # the two TrainConfigs
    b: object
    identical: bool
    parting: object  # a _compare.Parting, or None
    event_a: object  # _events.Event in each run, or None
    event_b: object
    rule: str | None  # the cause's rule (_causes.py), or None
    cause: str | None  # one plain sentence
    values: Values | None
    growth: list  # [Growth] per step
    seconds: dict  # {"A", "B", "float64", "diff"}: wall time of each run and of the whole diff
    facts_a: object
    facts_b: object
    params: int

    @property
    def differences(self) -> list:
        """[(fact, run A's, run B's)] for every fact of the two runs that differs (_facts.py)."""
        return [(f.name, getattr(self.facts_a, f.name), getattr(self.facts_b, f.name))
                for f in dataclasses.fields(self.facts_a) if getattr(self.facts_a, f.name) != getattr(self.facts_b,
                                                                                                        f.name)]

    def element(self) -> list | None:
        """The parting element's index in its tensor's shape (None: the tensor itself differs)."""
        p = self.parting
        if p is None or p.index is None:
            return None
        shape = _shape(p)
        return [int(i) for i in np.unravel_index(p.index, shape)] if shape else [p.index]

    def as_json(self) -> dict:
        out = {"identical": self.identical, "steps": len(self.growth), "params": self.params,
               "differences": [{"fact": n, "a": _plain(x), "b": _plain(y)} for n, x, y in self.differences]}
        if not self.identical:
            p, v = self.parting, self.values
            out.update(first_step=p.tensor.step, micro_batch=None if p.tensor.slot in (BEFORE, AFTER) else
                       p.tensor.slot, tensor=p.tensor.as_json(), where=p.tensor.describe(), index=p.index,
                       element=self.element(), why=p.why,
                       event_a=None if self.event_a is None else self.event_a.as_json(),
                       event_b=None if self.event_b is None else self.event_b.as_json(),
                       rule=self.rule, cause=self.cause,
                       values={"a": _number(v.a), "b": _number(v.b), "float64_a": v.float64_a,
                               "float64_b": v.float64_b})
        out["growth"] = [dataclasses.asdict(g) for g in self.growth]
        out["seconds"] = {k: round(s, 3) for k, s in self.seconds.items()}
        return out

    def text(self) -> str:
        lines = [f"zerosim diff: {self.params:,} parameters ({self.facts_a.model}), {len(self.growth)} steps, the same "
                 f"data and seed"]
        if self.differences:
            lines.append("the runs differ in: " + "; ".join(f"{LABELS[n]} {_plain(x)} vs {_plain(y)}"
                                                             for n, x, y in self.differences))
        if self.identical:
            lines.append(f"identical: every logical tensor of every step has the same bits in both runs (the loss "
                         f"after step {len(self.growth)}: {self.growth[-1].loss_a!r})" if self.growth else "identical")
            return "\n".join(lines)
        p, v = self.parting, self.values
        at = "" if self.element() is None else f", element {tuple(self.element())}"
        lines += ["", f"first parting: {p.tensor.describe()}{at}" + ("" if p.why == "bits" else f" ({p.why})")]
        if p.index is not None:
            lines += [f"  run A  {_show(v.a):>24}    float64 {_show(v.float64_a)}",
                      f"  run B  {_show(v.b):>24}    float64 {_show(v.float64_b)}"]
        # each event on one line (a record to grep for); the words around them wrapped at 116 columns
        lines += [f"event in run A: {self.event_a.text if self.event_a else '(none)'}",
                  f"event in run B: {self.event_b.text if self.event_b else '(none)'}",
                  *_wrapped(f"cause ({self.rule}): {self.cause}"), "",
                  *_wrapped("how it grows (the update-format weights after each step; ulps: the median distance of "
                            "the weights that differ, in units of the last place):"),
                  f"{'step':>5} {'loss A':>12} {'loss B':>12} {'ulps':>9} {'differ':>7} {'A vs B':>9} "
                  f"{'A-float64':>10} {'B-float64':>10}"]
        for g in _shown(self.growth):
            lines.append(f"{g.step:>5} {g.loss_a:>12.7g} {g.loss_b:>12.7g} {_ulps(g.ulps):>9} {g.differing:>7,} "
                         f"{g.rel_error:>9.2e} {g.a_to_float64:>10.2e} {g.b_to_float64:>10.2e}")
        last = self.growth[-1] if self.growth else None
        if last is not None:
            lines += ["", *_wrapped(f"neither is wrong: after step {last.step} run A is {last.a_to_float64:.2e} and "
                                    f"run B {last.b_to_float64:.2e} from the float64 run (relative L2 of the weights); "
                                    f"they are {last.rel_error:.2e} apart")]
        return "\n".join(lines)


def _wrapped(text: str) -> list:
    return wrap(text, "  ")


def _ulps(x: float) -> str:
    """A median distance in ulps: whole with thousands' commas from 1,000 on (a float's 1.285e+04 reads as 12,850)."""
    return f"{x:,.0f}" if x >= 1000 else f"{x:.4g}"


def _shape(p) -> tuple:
    return p.shape


def _shown(rows: list) -> list:
    """Every step up to 12; else the first 5, every tenth, and the last 5."""
    if len(rows) <= 12:
        return rows
    return [g for i, g in enumerate(rows) if i < 5 or i >= len(rows) - 5 or (i + 1) % 10 == 0]


def _number(x):
    """A scalar as a float (None for None or an array: a tensor one run lacks)."""
    if x is None or np.ndim(x) > 0:
        return None
    return float(np.asarray(x).astype(np.float64))


def _show(x) -> str:
    n = _number(x)
    return "(none)" if n is None else repr(n)


def _plain(x):
    return x if isinstance(x, (int, float, str, bool, type(None))) else repr(x)
