"""Grade a learner's file in the sandbox: the file runs in a confined child, the checks run here, case by case.

    result = grade_file("ring_chunk", "my_solution.py", time_limit=60)     # exercise check: the first counterexample
    with Learner(source, path, policy, time_limit) as learner:            # an assignment: every case its own verdict
        verdicts = learner.cases(exercise)

A learner's file may loop forever, print without end, call `sys.exit`, raise KeyboardInterrupt, crash the
interpreter, fail to compile, signal its parent or its group, start processes that outlive it, write outside its
folder, call zerosim's own implementation of what it is graded on, or write a verdict of its own on the grader's
pipe: none of that may take the grader down, leave it hanging, leave anything running, change a file outside the case
folder, or earn a point, and the grade (`zerosim assignment grade`'s results.json) is always written. The sandbox
(zerosim/teaching/sandbox/) runs the file in a confined, policed child that returns only what the learner's
functions returned; here is what grading means on top of it:

- each case's check runs in the grader, exactly as in a notebook (`Exercise.judge`), with a stand-in for the
  learner's function (`Learner.function`) that calls it in the child and returns its value, raises what it raised
  (`LearnerRaised`), and answers the callbacks it makes (an all_gather, a ledger Buffer's `.free()`: `HANDLES`); a
  check whose function must run inside a harness (assignment 4's gloo ranks) asks for it by name (`through`), and
  the child runs the harness there and returns its plain data;
- each case gets `time_limit` seconds of the learner's time, as does loading the file;
- a case in which the learner's code called zerosim code the policy refuses fails, with the policy's line, even where
  the learner's code caught the refusal;
- a case that ends the child (a timeout, output past the cap, an exit, a crash, a signal, a broken protocol) fails with
  one line saying what happened; the next case loads the file again in a new child, but a function that ended one is
  not called again (its remaining cases fail with the same line: a loop would otherwise cost the limit in every case).

The learner's prints reach the grader's stdout, up to the sandbox's cap (1 MiB).
"""

from __future__ import annotations

import os
import signal

from zerosim.teaching.exercises._grading import Counterexample, LearnerRaised, Result, describe, no_function
from zerosim.teaching.sandbox import OUTPUT_LIMIT, Budget, Ended, Outcome, Policy, Remote, Session

TIME_LIMIT = 60.0  # seconds per case (and for loading the file): generous, since the grader's own cases take < 2 s


def _handles() -> dict:
    """What the grader may lend a solution beyond functions, and what the solution may do with each: a ledger Buffer
    (stage2_free's `held`), its array read and freed as the engine's are."""
    from zerosim.cluster import Buffer

    return {Buffer: Remote(attrs=("name", "kind", "shape", "nbytes", "freed", "array"), methods=("free",))}


class Refusal(BaseException):
    """A case in which the learner's code called zerosim code the policy refuses: the case fails with `line`. A
    BaseException, so that a check's own `except Exception` cannot swallow it."""

    def __init__(self, line: str):
        super().__init__(line)
        self.line = line


class NoFunction(BaseException):
    """The file defines no such function: the learner's usage mistake, one line."""


class Learner:
    """The learner's file in the sandbox for as long as grading needs it, loaded again after a case ended the child."""

    def __init__(self, source: bytes, path: str, policy: Policy, time_limit: float = TIME_LIMIT):
        self.source, self.path, self.policy, self.limit = source, path, policy, float(time_limit)
        self.session, self.budget, self.unrunnable = None, None, None
        self.ended: dict = {}  # function -> the Outcome of the case in which it ended the child
        self.noted: list = []  # what the lecturer should see (processes started), in order, once each

    def __enter__(self) -> Learner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            session.close()

    def loaded(self) -> str | None:
        """None when the file loads; else the one line saying why it cannot run (every case fails with it)."""
        if self.unrunnable is None and self.session is None:
            self.session = Session(self.source, self.path, self.policy, handles=_handles())
            try:
                reply = self.session.load(Budget(self.limit))
            except Ended as e:
                self.unrunnable = ending(e.outcome, loading=True)
                self.close()
            else:
                self._note(reply.noted)
                if reply.event == "not runnable":
                    self.unrunnable = _hint(reply.fields.get("why") or f"{self.path} could not be run")
                    self.close()
        return self.unrunnable

    def function(self, name: str):
        """A stand-in for the learner's `name`: called here, it runs in the child under the current case's budget;
        `.via(harness, *args, **kwargs)` runs it there through one of the policy's harnesses (`through`)."""
        def call(*args, **kwargs):
            return run(None, args, kwargs)

        def via(harness: str, *args, **kwargs):
            return run(harness, args, kwargs)

        def run(harness, args, kwargs):
            if name in self.ended:
                raise Ended(self.ended[name])
            reply = self.session.call(name, args, kwargs, self.budget, via=harness)
            self._note(reply.noted)
            if reply.refused:
                raise Refusal(self.policy.refusal(name, reply.refused[0]))
            if isinstance(reply.error, Counterexample):  # a check inside a callback failed: the case's verdict
                raise reply.error
            if reply.error is not None:  # the grader refused what the callback asked (a freed buffer's array)
                raise LearnerRaised(type(reply.error).__name__, f"{type(reply.error).__name__}: {reply.error}",
                                    reply.fields.get("line", ""))
            if reply.event == "returned":
                return reply.fields["value"]
            if reply.event == "raised":
                f = reply.fields
                raise LearnerRaised(f.get("kind") or "", f.get("words") or "", f.get("line") or "", f.get("code"))
            if reply.event == "missing":
                raise NoFunction(no_function(self.path, name))
            if reply.event == "unsendable":
                raise Counterexample(f"your {name} returned {reply.fields.get('message')}, which cannot reach the "
                                     "grader")
            raise Ended(Outcome("broke the protocol"))  # a reply the session let through but no call answers with

        call.__name__ = name
        call.via = via
        return call

    def judge(self, exercise, case) -> str | None:
        """One case: None when it passes, else its line. Never raises for what the learner's code did."""
        why = self.loaded()
        if why is not None:
            return why
        if exercise.function in self.ended:
            return f"{describe(case)}: not run: {ending(self.ended[exercise.function], again=True)}"
        self.budget = Budget(self.limit)
        try:
            return _hint(exercise.judge(self.function(exercise.function), case))
        except Refusal as e:
            return f"{describe(case)}: {e.line}"
        except Ended as e:
            self.ended[exercise.function] = e.outcome
            self.close()  # a new child for the next case
            return f"{describe(case)}: {ending(e.outcome)}"

    def _note(self, noted: list) -> None:
        self.noted += [n for n in noted if n not in self.noted]


def ending(o, loading: bool = False, again: bool = False) -> str:
    """The sandbox's Outcome `o` in one line: it ended this case, or the file's `loading`, or (`again`) an earlier
    case of the same function."""
    at = "loading your file" if loading else "this case"
    during = "while your file was loaded" if loading else "during this case"
    if again:
        at, during = "an earlier case", "during an earlier case"
    if o.how == "timed out":
        return (f"{at} did not finish within {o.facts['limit']:g} s: does your code loop forever? (zerosim exercise "
                "check --time-limit S allows more)")
    if o.how == "too much output":
        return f"{at} printed more than {OUTPUT_LIMIT // (1 << 20)} MiB and was stopped: print less (a few lines say " \
               "what a case did)"
    if o.how == "parent ended":
        s = o.keeper_status
        how = signal.Signals(-s).name if s is not None and s < 0 else f"exit status {s}"
        return (f"the process that started your code was ended ({how}) {during}: did your code signal its parent "
                "(os.getppid())? A solution may not signal other processes")
    if o.how == "broke the protocol":
        return (f"{during}, your code wrote on the grader's own report pipe: a solution may print, but not write to "
                "the grader's file descriptors")
    s = o.status  # "ended"
    how = ("an unknown status" if s is None else f"signal {signal.Signals(-s).name} (exit status {s})" if s < 0
           else f"exit status {s}")
    return f"the grading process ended {during}, with {how} (os._exit, a crash or a signal) and no result"


def policy_of(ex, handout: str | None = None) -> Policy:
    """The sandbox's policy for exercise `ex`: what it grades, what its handout offers."""
    return Policy({ex.function: tuple(ex.grades)}, tuple(ex.offers), handout or f"exercise {ex.name}'s handout",
                  tuple(ex.harnesses))


def grade_file(name: str, path: str, time_limit: float = TIME_LIMIT) -> Result:
    """Grade the file at `path` for exercise `name` in the sandbox; each case may take `time_limit` seconds. The first
    failing case is the counterexample; a file that defines no such function is a ValueError (the learner's usage)."""
    from zerosim.teaching import exercises

    ex = exercises.get(name)
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise ValueError(f"time_limit must be a number of seconds > 0, got {time_limit!r}")
    source = read(path)
    with Learner(source, path, policy_of(ex), time_limit) as learner:
        why = learner.loaded()
        if why is not None:
            return Result(ex.name, False, 0, why)
        n = 0
        for n, case in enumerate(ex.cases(), 1):
            try:
                failed = learner.judge(ex, case)
            except NoFunction as e:
                raise ValueError(str(e)) from None
            if failed is not None:
                return Result(ex.name, False, n, failed)
        return Result(ex.name, True, n)


def read(path: str) -> bytes:
    """The learner's file, read by the grader (a confined child need not be able to)."""
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    with open(path, "rb") as f:
        return f.read()


def _hint(said: str | None) -> str | None:
    """`said`, and where the learner's code met a PermissionError, the sandbox's rules that likely raised it."""
    if said and "raised PermissionError" in said:
        said += (" (in the grader a solution may write only in its own folder, its working directory, may not signal "
                 "other processes, and may not read zerosim's own code of what it is graded on)")
    return said
