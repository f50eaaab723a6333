"""zerosim lint: the silent numerics traps a training configuration falls into, each with the framework release, file
and function that makes it, a user thread that hit it, and what to expect — measured on the simulator where zerosim
can run the trap beside its way out (zerosim.diff).

    _rules.py   RULES: the traps as data (test, sentence, source, thread, the change that avoids it)
    _setup.py   Setup: what the rules read of a TrainConfig or a DeepSpeed config
    _lint.py    lint(config, ds=None, measure=0) -> [Finding]

    from zerosim.lint import lint
    for finding in lint(TrainConfig(precision="fp16-mixed"), measure=5):
        print(finding.severity, finding.rule, finding.message, finding.measured)
"""

from zerosim.lint._lint import Finding, lint
from zerosim.lint._rules import RULES, SEVERITIES, Rule
from zerosim.lint._setup import Setup, setup_of

__all__ = ["Finding", "RULES", "Rule", "SEVERITIES", "Setup", "lint", "setup_of"]
