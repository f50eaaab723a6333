"""`lint(config)`: the rules (_rules.py) that a configuration falls under, each with what to expect, its source and its
thread; with `measure=S`, each trap zerosim can run is trained beside its way out for S steps (zerosim.diff) and the
distance between them, and each one's to a float64 run, is said."""

from __future__ import annotations

import dataclasses

from zerosim._dataclass import dataclass
from zerosim.lint._rules import RULES
from zerosim.lint._setup import setup_of
from zerosim.precision import get_precision

PRECISION_FIELDS = {f.name for f in dataclasses.fields(get_precision("fp32"))}


@dataclass(frozen=True)
class Finding:
    """One rule a configuration falls under."""

    rule: str
    severity: str
    message: str
    source: str  # the framework release, file and function that makes the trap
    thread: str  # the user report that hit it
    measured: dict | None = None  # {"steps", "apart", "trap_to_float64", "fixed_to_float64", ...}, or None

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def lint(config=None, ds=None, measure: int = 0) -> list:
    """The findings of a zerosim.train.TrainConfig `config` (or, with `ds`, a frameworks.deepspeed.DeepSpeedRun as
    DeepSpeed runs it, on `config`'s ranks and tensor-parallel degree). `measure`: steps to train each trap beside its
    way out (0: none; needs `config`, which then is what is trained)."""
    setup = setup_of(config, ds)
    found = []
    for rule in RULES:
        if rule.applies(setup):
            measured = measured_for(config, rule.fix, measure) if measure and rule.fix is not None and config else None
            found.append(Finding(rule.name, rule.severity, rule.says(setup), rule.source, rule.thread, measured))
    return found


def measured_for(config, fix: dict, steps: int) -> dict:
    """The trap (`config`) and its way out (`fix` applied) trained for `steps` steps and compared by zerosim.diff."""
    from zerosim.diff import diff

    precision = {k: v for k, v in fix.items() if k in PRECISION_FIELDS}
    try:
        fixed = dataclasses.replace(config, precision=get_precision(config.precision).with_(**precision))
        report = diff(config, fixed, steps=steps)
    except ValueError as e:  # a way out zerosim does not run beside this configuration
        return {"steps": steps, "not run": str(e)}
    last = report.growth[-1]
    return {"steps": steps, "apart": last.rel_error, "trap_to_float64": last.a_to_float64,
            "fixed_to_float64": last.b_to_float64, "loss_trap": last.loss_a, "loss_fixed": last.loss_b,
            "first_parting": None if report.identical else report.parting.tensor.describe()}
