"""The tables of bad input in docs/explanation/testing.md are the test suite's own counts, not typed in.

By feature (issue 35): every hostile case of tests/hostile_cases.py is run (tests/test_hostile_table.py) and its
answer classified clear, raw, silent or crash; the table counts every attempt, and any answer that is not clear
fails the suite, so a row reads 100 % only when every case that ran got a clear error. The table is made here
(feature_table) and checked in tests/test_hostile_table.py against the outcomes the cases got in that run, so that
the cases run once, not again in a process of their own.

By what the input reaches: every test marked `@pytest.mark.bad_input("category")` feeds bad input and checks a
clear error; with `unchanged=True` it also checks that nothing changed before the error. Collecting the suite
counts each case (every parametrized case and Hypothesis test counts once).

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
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(ROOT / "tests")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG_TIMEOUT,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        with open(path) as f:
            return json.load(f)


def table(cases: list) -> str:
    total, unchanged = Counter(c["category"] for c in cases), Counter(c["category"] for c in cases if c["unchanged"])
    rows = [
        "| bad input, by what it reaches | cases with a clear error | of which also check nothing changed |",
        "|---|---|---|",
    ]
    for category in sorted(total, key=lambda c: (-total[c], c)):
        rows.append(f"| {category} | {total[category]} | {unchanged[category]} |")
    rows.append(f"| **all** | **{sum(total.values())}** | **{sum(unchanged.values())}** |")
    return "\n".join(rows)


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


@pytest.mark.slow  # collects the whole suite in a process of its own
def test_the_readme_table_is_the_suites_count():
    cases = census()
    assert len(cases) > 100  # the marks are there: a broken census would give an empty table
    assert readme_table(PAGE.read_text()) == table(cases), (
        "refresh it: python tests/test_bad_input_table.py"
    )


def _replace(text: str, marks, body: str) -> str:
    start, stop = text.index(marks[0]) + len(marks[0]), text.index(marks[1])
    return text[:start] + "\n" + body + "\n" + text[stop:]


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "tests"))
    text = _replace(PAGE.read_text(), (BEGIN, END), table(census()))
    PAGE.write_text(_replace(text, BY_FEATURE, feature_table(hostile_outcomes())))
    print(f"{PAGE.relative_to(ROOT)}: bad-input tables refreshed")
