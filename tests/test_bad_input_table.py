"""The tables of bad input in docs/explanation/testing.md are the test suite's own counts, not typed in.

By feature (issue 35): every hostile case of tests/hostile_cases.py is run (tests/test_hostile_table.py) and its
answer classified clear, raw, silent or crash; the table counts every attempt, and any answer that is not clear
fails the suite, so a row reads 100 % only when every case that ran got a clear error. The table is made here
(feature_table) and checked in tests/test_hostile_table.py against the outcomes the cases got in that run, so that
the cases run once, not again in a process of their own.

By what the input reaches: every test marked `@pytest.mark.bad_input("category")` feeds bad input and checks a
clear error; with `unchanged=True` it also checks that nothing changed before the error. The refresh runs them all
(`pytest -m bad_input`) and tests/conftest.py classifies each case's answer: clear (it passed), silent (nothing was
raised: the input was accepted), raw (any other failure), not run (skipped); the table counts each, so a hole shows
in its row (and fails the suite). Collecting the suite counts the cases (every parametrized case and Hypothesis test
counts once): the check below holds the page's counts to the collected ones.

To refresh the page after adding cases:  python tests/test_bad_input_table.py
"""

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from helpers import HANG_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "explanation" / "testing.md"  # where the tables are shown
BEGIN, END = "<!-- bad-input-table -->", "<!-- /bad-input-table -->"
BY_FEATURE = "<!-- hostile-table -->", "<!-- /hostile-table -->"
OUTCOMES = ("clear", "raw", "silent", "crash")


def census() -> list:
    """[{"test", "category", "unchanged"}] for every collected bad-input case."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "census.json")
        env = dict(os.environ, ZEROSIM_BAD_INPUT_CENSUS=path)
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "--assert=plain",
             str(ROOT / "tests")],  # --assert=plain: a collection runs no assert (tests/test_pinned_selection.py)
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG_TIMEOUT,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        with open(path) as f:
            return json.load(f)


BY_REACH = ("clear", "raw", "silent", "not run")  # what a bad-input case's run said (tests/conftest.py)


def table(cases: list, outcomes: list) -> str:
    """The table by what the input reaches: per category the cases tried (run), how many answered clear, raw or
    silent, how many did not run, and how many also check that nothing changed. `cases`: the census (collected);
    `outcomes`: [{"test", "outcome"}] of a run (a collected case that did not run there counts as not run)."""
    said = {o["test"]: o["outcome"] for o in outcomes}
    total = Counter(c["category"] for c in cases)
    got = Counter((c["category"], said.get(c["test"], "not run")) for c in cases)
    unchanged = Counter(c["category"] for c in cases if c["unchanged"])
    rows = [
        "| bad input, by what it reaches | cases tried | clear | raw | silent | not run | also check nothing changed |",
        "|---|---|---|---|---|---|---|",
    ]
    for category in (*sorted(total, key=lambda c: (-total[c], c)), None):
        n = {k: sum(v for (c, o), v in got.items() if o == k and category in (c, None)) for k in BY_REACH}
        tried = n["clear"] + n["raw"] + n["silent"]
        name, kept = (category, unchanged[category]) if category else ("**all**", sum(unchanged.values()))
        rows.append(f"| {name} | {tried} | {n['clear']} | {n['raw']} | {n['silent']} | {n['not run']} | {kept} |")
    return "\n".join(rows)


def run_outcomes() -> list:
    """[{"test", "category", "unchanged", "outcome"}] of every bad-input case, from a run of `pytest -m bad_input` in a
    process of its own (minutes: the refresh's, not a test's)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "outcomes.json")
        env = dict(os.environ, ZEROSIM_BAD_INPUT_OUTCOMES=path)
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "bad_input",
                        *(["-n", "2"] if _has_xdist() else []), str(ROOT / "tests")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=HANG_TIMEOUT)
        with open(path) as f:
            return json.load(f)


def _has_xdist() -> bool:
    import importlib.util

    return importlib.util.find_spec("xdist") is not None


def readme_table(text: str, marks=(BEGIN, END)) -> str:
    start, stop = text.index(marks[0]) + len(marks[0]), text.index(marks[1])
    return text[start:stop].strip()


def hostile_outcomes() -> list:
    """[{"feature", "case", "outcome", "said"}] of every case tests/test_hostile_table.py ran (a process of its own;
    the refresh below uses it)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "outcomes.json")
        env = dict(os.environ, ZEROSIM_HOSTILE_OUTCOMES=path)
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(ROOT / "tests" / "test_hostile_table.py")], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=HANG_TIMEOUT)
        with open(path) as f:
            return json.load(f)


def feature_table(outcomes: list) -> str:
    from hostile_cases import FEATURES

    count = Counter((o["feature"], o["outcome"]) for o in outcomes)
    rows = ["| feature | cases run | clear | raw | silent | crash | clear |", "|---|---|---|---|---|---|---|"]
    for feature in (*FEATURES, None):
        got = {k: sum(n for (f, o), n in count.items() if o == k and feature in (f, None)) for k in OUTCOMES}
        total = sum(got.values())
        name = feature or "**all**"
        share = f"{100 * got['clear'] / total:.0f} %" if total else "-"
        counts = " | ".join(str(got[k]) for k in OUTCOMES)
        rows.append(f"| {name} | {total} | {counts} | {share} |")
    return "\n".join(rows)


def test_a_case_that_is_not_clear_shows_in_its_row():
    rows = feature_table([{"feature": "replay", "outcome": "clear"}, {"feature": "replay", "outcome": "silent"}])
    assert "| replay | 2 | 1 | 0 | 1 | 0 | 50 % |" in rows and "| **all** | 2 | 1 | 0 | 1 | 0 | 50 % |" in rows


def test_a_bad_input_case_that_is_not_clear_shows_in_its_row():
    cases = [{"test": f"t{i}", "category": "configs", "unchanged": i == 0} for i in range(4)]
    outcomes = [{"test": "t0", "outcome": "clear"}, {"test": "t1", "outcome": "silent"},
                {"test": "t2", "outcome": "raw"}]  # t3: collected, not run
    rows = table(cases, outcomes)
    assert "| configs | 3 | 1 | 1 | 1 | 1 | 1 |" in rows and "| **all** | 3 | 1 | 1 | 1 | 1 | 1 |" in rows


class _Report:
    def __init__(self, when, outcome, longrepr=""):
        self.when, self.longrepr = when, longrepr
        self.passed, self.failed, self.skipped = (outcome == k for k in ("passed", "failed", "skipped"))


@pytest.mark.parametrize("report, said", [
    (_Report("call", "passed"), "clear"),
    (_Report("call", "failed", "E   Failed: DID NOT RAISE <class 'ValueError'>"), "silent"),  # accepted
    (_Report("call", "failed", "E   AssertionError: Regex pattern did not match."), "raw"),  # other words
    (_Report("call", "failed", "E   ZeroDivisionError: division by zero"), "raw"),  # another exception
    (_Report("setup", "failed", "E   fixture failed"), "raw"),
    (_Report("setup", "skipped"), "not run"),
    (_Report("setup", "passed"), None),
])
def test_each_answer_is_classified_as_the_table_counts_it(report, said):
    from conftest import bad_input_outcome

    assert bad_input_outcome(report) == said


def page_counts(text: str) -> dict:
    """{category: (tried, clear, raw, silent, not run, unchanged)} of the page's table."""
    out = {}
    for line in readme_table(text).splitlines()[2:]:
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        out[cells[0]] = tuple(int(c) for c in cells[1:])
    return out


@pytest.mark.slow  # collects the whole suite in a process of its own
def test_the_readme_table_is_the_suites_count():
    cases = census()
    assert len(cases) > 100  # the marks are there: a broken census would give an empty table
    counts = page_counts(PAGE.read_text())
    total, unchanged = Counter(c["category"] for c in cases), Counter(c["category"] for c in cases if c["unchanged"])
    expected = {c: (total[c], unchanged[c]) for c in total} | {"all": (len(cases), sum(unchanged.values()))}
    got = {c: (n[0] + n[4], n[5]) for c, n in counts.items()}  # tried + not run = collected
    assert got == expected, "refresh it: python tests/test_bad_input_table.py"
    assert all(n[0] == n[1] + n[2] + n[3] for n in counts.values())  # every case tried is counted once


def _replace(text: str, marks, body: str) -> str:
    start, stop = text.index(marks[0]) + len(marks[0]), text.index(marks[1])
    return text[:start] + "\n" + body + "\n" + text[stop:]


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "tests"))
    text = _replace(PAGE.read_text(), (BEGIN, END), table(census(), run_outcomes()))
    PAGE.write_text(_replace(text, BY_FEATURE, feature_table(hostile_outcomes())))
    print(f"{PAGE.relative_to(ROOT)}: bad-input tables refreshed")
