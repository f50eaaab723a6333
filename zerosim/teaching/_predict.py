"""Predict, then run: a learner types a number, and the package says how far off it is and why.

    from zerosim.teaching import predict
    my_answer = 46
    predict("seed004-stage2-peak", my_answer)     # in a notebook: the cell shows the verdict

Each `Question` (the notebooks' are in _questions.py) computes its own answer from zerosim — a run, a ledger, a
timeline — so the verdict is the run's, never a number typed into a notebook. A guess within the question's
tolerance is right; a guess that matches a known wrong answer (a misconception: seed 001's printed table, forgetting
the fp32 gradient, a bidirectional bandwidth, ...) is named as that misconception; any other is told by how much and
which way it is off. Every verdict ends with why the answer is what it is.

The same scoring (`judge`) grades the assignments' predictions at submission (teaching/assignments).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Question:
    name: str
    ask: str  # the question, one or two sentences
    unit: str  # what the number is counted in ("B", "GB", "ms", "x", "%", "")
    answer: object  # () -> float: the run's answer, computed when asked (cached per process)
    why: str  # why it is what it is: shown after any guess
    # relative tolerance, with its reason beside it where it is not exact; 0: exact (a count of bytes, an fp16 value)
    tolerance: float = 0.0
    wrong: tuple = ()  # ((value or () -> value, "what that number is: the misconception"), ...)
    digits: int = 6  # significant digits a verdict prints
    needs: str = ""  # a module the answer's run imports (torch for the parity lab); missing: the verdict says so
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def available(self) -> bool:
        """Whether this machine can compute the answer (the module `needs` names is installed)."""
        import importlib.util

        return not self.needs or importlib.util.find_spec(self.needs) is not None

    def value(self) -> float:
        if "answer" not in self._cache:
            self._cache["answer"] = float(self.answer())
        return self._cache["answer"]


@dataclass(frozen=True)
class Verdict:
    """What `predict` or `judge` found: `right`, the relative error `off` (None without a guess), the message;
    `answer` is NaN when `predict` had no guess (its run waits for one)."""

    name: str
    guess: float | None
    answer: float
    right: bool
    off: float | None
    message: str
    misconception: str | None = None

    def __repr__(self) -> str:  # a notebook shows the message, as a cell's last value
        return self.message

    __str__ = __repr__


def _fmt(x: float, unit: str, digits: int) -> str:
    text = f"{x:,.{digits}g}" if abs(x) >= 1e5 and float(x).is_integer() else f"{x:.{digits}g}"
    return f"{text} {unit}".rstrip() if unit not in ("%", "x") else f"{text}{unit}"


def close(guess: float, target: float, tolerance: float) -> bool:
    """`guess` within `tolerance` (relative) of `target`; exact (to a part in 1e12) when `tolerance` is 0."""
    return math.isclose(guess, target, rel_tol=max(tolerance, 1e-12), abs_tol=1e-300)


def judge(guess, answer: float, *, tolerance: float = 0.0, unit: str = "", why: str = "", wrong=(), name: str = "",
          ask: str = "", digits: int = 6) -> Verdict:
    """Score `guess` against `answer`: right within `tolerance`; else named by a misconception in `wrong` it
    matches (within the same tolerance), else by how far and which way it is off. Never raises on a learner's
    value: None, a string or NaN get a verdict that says what to type."""
    said = lambda x: _fmt(x, unit, digits)  # noqa: E731
    if guess is None or guess is ...:
        return Verdict(name, None, answer, False, None,
                       f"No prediction yet. {ask} Type your number into my_answer above and run this cell again; "
                       "then run the next cell to see the run's answer.".replace("  ", " ").strip())
    try:
        g = float(guess)
    except (TypeError, ValueError):
        return Verdict(name, None, answer, False, None, f"my_answer should be a number ({unit or 'no unit'}), got "
                                                        f"{guess!r}")
    if not math.isfinite(g):
        return Verdict(name, g, answer, False, None, f"my_answer should be a finite number, got {guess!r}")
    off = (g - answer) / abs(answer) if answer else (0.0 if g == 0 else math.inf)
    if close(g, answer, tolerance):
        within = "" if tolerance == 0 else f" (within the {tolerance:.0%} tolerance)"
        return Verdict(name, g, answer, True, off, f"Right: you said {said(g)}; the run gives {said(answer)}{within}."
                                                   + _why(why))
    side = "above" if g > answer else "below"
    how = f"{abs(off):.1%} {side} it" if answer else f"{said(abs(g - answer))} {side} it"
    for value, misconception in wrong:
        v = float(value() if callable(value) else value)
        if close(g, v, tolerance):
            return Verdict(name, g, answer, False, off,
                           f"Not quite: you said {said(g)}; the run gives {said(answer)} (yours is {how}).\n"
                           f"The misconception: {said(v)} is {misconception}" + _why(why), misconception)
    return Verdict(name, g, answer, False, off,
                   f"Off: you said {said(g)}; the run gives {said(answer)} (yours is {how})." + _why(why))


def _why(why: str) -> str:
    return f"\nWhy: {why}" if why else ""


def predict(name: str, guess) -> Verdict:
    """The verdict on `guess` for question `name` (a key of QUESTIONS, teaching/_questions.py)."""
    from zerosim.teaching._questions import QUESTIONS

    if name not in QUESTIONS:
        raise KeyError(f"no question {name!r}; there are {', '.join(QUESTIONS)}")
    q = QUESTIONS[name]
    if not q.available():
        return Verdict(name, None, float("nan"), False, None, f"This question's run needs {q.needs}, which is not "
                       f"installed here: pip install -e '.[parity]' (a CPU build of torch is enough).")
    # Nothing typed yet: the verdict asks for a number and shows no answer, so the answer's run (a training run, for
    # some) waits for a guess; a notebook run as shipped computes none of them.
    waiting = guess is None or guess is ...
    return judge(guess, math.nan if waiting else q.value(), tolerance=q.tolerance, unit=q.unit, why=q.why,
                 wrong=q.wrong, name=name, ask=q.ask, digits=q.digits)
