"""How an exercise is graded: a learner's function, run case by case against the package's own answer.

Cases come smallest first, so the first one that fails is a small counterexample a learner can read
by hand. A case fails when the learner's function raises (the stub raises NotImplementedError), when
a check in the harness raises `Counterexample`, or when the run it takes part in ends with different
bits from the oracle's. The harness puts the learner's function where the package's own belongs through the
engine's named extension points (`zerosim.parallel.data.Hooks`): one engine gets it, nothing in the package is patched.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import numpy as np

from zerosim.teaching.sandbox import learner_line, run_source

# Where the reference of an exercise that assignment 2 grades lives: with the instructor, never in the package
WITHHELD = "assignment 2's, kept with the instructor (course/instructor/a2/solution.py in zerosim's repository)"


# What a solution may use beside numpy, in every exercise and assignment the sandbox grades (their handouts'): casts and
# formats, the cluster (ranks, ledgers, the trace) and its backends. Nothing here answers a case: the collectives,
# the engines, the oracle and the cost models do, and each exercise names those it grades (`Exercise.grades`).
OFFERS = ("zerosim.precision", "zerosim.cluster", "zerosim.backends")
# What the engine-run exercises grade: the engine's own pieces, the collectives under them, the oracle beside them
ENGINE = ("zerosim.parallel", "zerosim.collectives", "zerosim.reference")


class Counterexample(Exception):
    """Raised by a harness check: the message says what the learner's function did and what it should have."""


class LearnerRaised(Exception):
    """The learner's function raised `kind` in the sandbox's child (`words`: "Kind: message"; `line`: where in their
    file; `code`: sys.exit's argument, as repr)."""

    def __init__(self, kind: str, words: str, line: str = "", code: str | None = None):
        super().__init__(words)
        self.kind, self.words, self.line, self.code = kind, words, line, code


@dataclass(frozen=True)
class Result:
    """What grading found: passed, how many cases ran, and the first counterexample (None when passed)."""

    exercise: str
    passed: bool
    cases: int  # cases run: all of them when passed, up to and including the failing one otherwise
    counterexample: str | None = None

    def __str__(self) -> str:
        if self.passed:
            return f"{self.exercise}: passed all {self.cases} cases"
        if self.cases == 0:  # the learner's file could not be run at all: one line saying why
            return f"{self.exercise}: failed before any case ran — {self.counterexample}"
        return f"{self.exercise}: failed on case {self.cases} — counterexample:\n  " + self.counterexample.replace(
            "\n", "\n  "
        )


@dataclass(frozen=True)
class Exercise:
    """One exercise: the function a learner writes, the words that ask for it, and how it is graded."""

    name: str
    title: str  # one line, for `zerosim exercise list`
    function: str  # the name of the function the learner defines
    task: str  # what to do and why, in a few sentences
    stub: str  # the file a learner starts from: the signature, a docstring, `raise NotImplementedError`
    solution: str  # a reference solution, as source: it passes ("" when it is withheld)
    planted: dict = field(default_factory=dict)  # {bug name: source with that bug}: the grader catches each
    cases: object = None  # cases() -> iterable of cases, smallest first
    check: object = None  # check(fn, case) -> None, or raises Counterexample (or the learner's own error)
    withheld: str = ""  # when `solution` is "": where its reference lives instead, in words (an assignment's)
    # zerosim's modules whose own code answers these cases: the sandbox refuses a solution's calls into them
    # (zerosim/teaching/sandbox/_policy.py), and its refusal names them
    grades: tuple = ()
    offers: tuple = OFFERS  # what the handout gives a solution beside numpy (loaded for real in the sandbox)
    # "module:function" the check runs the learner's function through (`through`): in the sandbox, in its child
    harnesses: tuple = ()

    def judge(self, fn, case) -> str | None:
        """None when `fn` passes `case`, else the one line (or few) saying how it failed."""
        try:
            self.check(fn, case)
        except Counterexample as e:
            return f"{describe(case)}: {e}"
        except LearnerRaised as e:  # in the sandbox: the learner's function raised in the child
            if e.kind == "NotImplementedError":
                return f"{describe(case)}: {self.function} is not written yet (it raised NotImplementedError)"
            if e.kind == "SystemExit":
                return f"{describe(case)}: your {self.function} called sys.exit({e.code}); return a value instead"
            return f"{describe(case)}: your {self.function} raised {e.words}{e.line}"
        except NotImplementedError:
            return f"{describe(case)}: {self.function} is not written yet (it raised NotImplementedError)"
        except SystemExit as e:  # sys.exit() in the learner's function must not end the grader
            return f"{describe(case)}: your {self.function} called sys.exit({e.code!r}); return a value instead"
        except Exception as e:  # the learner's code failed: say where, in their words
            where = learner_line(e, getattr(getattr(fn, "__code__", None), "co_filename", None))
            return f"{describe(case)}: your {self.function} raised {type(e).__name__}: {e}{where}"
        return None

    def grade(self, fn, on_case=None) -> Result:
        """Run every case against `fn` (the learner's function); the first failure is the counterexample.
        `on_case(n, case)` is told before case n runs."""
        n = 0
        for n, case in enumerate(self.cases(), 1):
            if on_case is not None:
                on_case(n, case)
            failed = self.judge(fn, case)
            if failed is not None:
                return Result(self.name, False, n, failed)
        return Result(self.name, True, n)


def through(fn, harness: str, *args, **kwargs):
    """What `harness` ("module:function", one of the exercise's `harnesses`) returns when it runs the learner's `fn`
    on `args`: for a function whose arguments cannot cross the sandbox's pipe (torch tensors on gloo processes). In
    the sandbox, `fn` is the grader's stand-in and the harness runs in the child, beside the learner's code, and
    returns plain data (zerosim/teaching/sandbox/_child.py); in this process (a notebook), it runs here on `fn`."""
    via = getattr(fn, "via", None)
    if via is not None:
        return via(harness, *args, **kwargs)
    module, _, name = harness.partition(":")
    return getattr(importlib.import_module(module), name)(fn, *args, **kwargs)


def describe(case: dict) -> str:
    """A case in words: its "what" entry."""
    return case["what"]


def load(source: str, function: str, filename: str = "<exercise>"):
    """The function called `function` that `source` defines (a ValueError naming it when there is none; a
    NotRunnable with one line when the file does not compile, fails to import, raises or calls sys.exit)."""
    fn = run_source(source, filename).get(function)
    if not callable(fn):
        raise ValueError(no_function(filename, function))
    return fn


def no_function(filename: str, function: str) -> str:
    """The usage line for a file that defines no `function`."""
    return f"{filename} defines no function {function}(...); start from `zerosim exercise show`"


def first_difference(got, want, what: str, where=None) -> str | None:
    """None when `got` and `want` hold the same bits; else which element differs first, with both values
    (and `where(i)`, when given, says more about element i)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"{what} has shape {got.shape}, the oracle's {want.shape}"
    if got.dtype != want.dtype:
        return f"{what} is {got.dtype}, the oracle's is {want.dtype}"
    same = got.view(f"u{got.dtype.itemsize}") == want.view(f"u{want.dtype.itemsize}")
    if same.all():
        return None
    i = int(np.flatnonzero(~same)[0])
    return f"{what}[{i}] is {float(got.flat[i])!r}; the oracle's is {float(want.flat[i])!r}" + (
        where(i) if where else ""
    )


def train_against_oracle(make_engine, reference, batches: list) -> None:
    """Step the oracle on `batches` (one entry per step), then the engine `make_engine()` builds (with the
    learner's hook in it); after each step every rank's 16-bit params and the fp32 masters must equal the
    oracle's, bit for bit. Raises Counterexample at the first difference."""
    want = []
    for b in batches:  # the oracle runs first (a hook lives in one engine only: the oracle never sees it)
        reference.step(b)
        want.append((reference.compute_params(), reference.master()))
    engine = make_engine()
    for step, (b, (params, master)) in enumerate(zip(batches, want), 1):
        engine.step(b)
        for r in range(engine.cluster.world_size):
            held = engine.compute_params(r)[: engine.model.num_params] if not engine.plan.shards("params") else None
            s = engine.layout.shard_size
            problem = (
                first_difference(
                    held,
                    params,
                    f"after step {step}, rank {r}'s 16-bit params",
                    lambda i: f" (element {i} is in rank {i // s}'s shard)",
                )
                if held is not None
                else None
            )
            if problem:
                raise Counterexample(problem)
        problem = first_difference(engine.full_master(), master, f"after step {step}, the fp32 master")
        if problem:
            raise Counterexample(problem)
