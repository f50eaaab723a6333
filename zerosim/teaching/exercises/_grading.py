"""How an exercise is graded: a learner's function, run case by case against the package's own answer.

Cases come smallest first, so the first one that fails is a small counterexample a learner can read
by hand. A case fails when the learner's function raises (the stub raises NotImplementedError), when
a check in the harness raises `Counterexample`, or when the run it takes part in ends with different
bits from the oracle's. The harness puts the learner's function where the package's own belongs through the
engine's named extension points (`zerosim.parallel.data.Hooks`): one engine gets it, nothing in the package is patched.
"""

from __future__ import annotations

import linecache
import traceback
from dataclasses import dataclass, field

import numpy as np

# Where the reference of an exercise that assignment 2 grades lives: with the instructor, never in the package
WITHHELD = "assignment 2's, kept with the instructor (course/instructor/a2/solution.py in zerosim's repository)"


class Counterexample(Exception):
    """Raised by a harness check: the message says what the learner's function did and what it should have."""


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

    def grade(self, fn, on_case=None) -> Result:
        """Run every case against `fn` (the learner's function); the first failure is the counterexample.
        `on_case(n, case)` is told before case n runs (_sandbox.py times each case from it)."""
        n = 0
        for n, case in enumerate(self.cases(), 1):
            if on_case is not None:
                on_case(n, case)
            try:
                self.check(fn, case)
            except Counterexample as e:
                return Result(self.name, False, n, f"{describe(case)}: {e}")
            except NotImplementedError:
                return Result(self.name, False, n, f"{describe(case)}: {self.function} is not written yet (it raised "
                                                   "NotImplementedError)")
            except SystemExit as e:  # sys.exit() in the learner's function must not end the grader
                return Result(self.name, False, n, f"{describe(case)}: your {self.function} called "
                                                   f"sys.exit({e.code!r}); return a value instead")
            except Exception as e:  # the learner's code failed: say where, in their words
                where = _learner_line(e, getattr(getattr(fn, "__code__", None), "co_filename", None))
                return Result(self.name, False, n, f"{describe(case)}: your {self.function} raised {type(e).__name__}: "
                                                   f"{e}{where}")
        return Result(self.name, True, n)


def describe(case: dict) -> str:
    """A case in words: its "what" entry."""
    return case["what"]


def _learner_line(error: Exception, filename: str | None) -> str:
    """' (line L: code)' for the innermost frame in the learner's file `filename`, if any."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if frame.filename == filename:
            return f" (line {frame.lineno}: {frame.line})" if frame.line else f" (line {frame.lineno})"
    return ""


class NotRunnable(Exception):
    """The learner's file could not be run to define its function: the message is one line saying why."""


def load(source: str, function: str, filename: str = "<exercise>"):
    """The function called `function` that `source` defines (a ValueError naming it when there is none; a
    NotRunnable with one line when the file does not compile, fails to import, raises or calls sys.exit)."""
    namespace = {"__name__": "exercise_solution"}
    if filename.startswith("<"):  # source with no file: let tracebacks quote its lines all the same
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as e:  # one line: where and what, not a traceback
        text = f": {e.text.strip()}" if e.text and e.text.strip() else ""
        raise NotRunnable(f"{filename} line {e.lineno}: {type(e).__name__}: {e.msg}{text}") from None
    try:
        exec(code, namespace)  # the learner's own file: running it is the point
    except SystemExit as e:
        raise NotRunnable(f"{filename} called sys.exit({e.code!r}) while it was loaded; "
                          "define the function only") from None
    except Exception as e:  # an import that fails, a name error at the top level, ...
        where = _learner_line(e, filename)
        raise NotRunnable(f"{filename}{where or ''}: loading it raised {type(e).__name__}: {e}") from None
    fn = namespace.get(function)
    if not callable(fn):
        raise ValueError(f"{filename} defines no function {function}(...); start from `zerosim exercise show`")
    return fn


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
