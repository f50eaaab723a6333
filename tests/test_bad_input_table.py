"""README's table of bad-input cases is the test suite's own count, not typed in.

Every test marked `@pytest.mark.bad_input("category")` feeds bad input and checks a clear error; with
`unchanged=True` it also checks that nothing changed before the error. Collecting the suite counts
each case (every parametrized case and Hypothesis test counts once). To refresh README.md after adding
such tests:  python tests/test_bad_input_table.py
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
BEGIN, END = "<!-- bad-input-table -->", "<!-- /bad-input-table -->"


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


def readme_table(text: str) -> str:
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:stop].strip()


@pytest.mark.slow  # collects the whole suite in a process of its own
def test_the_readme_table_is_the_suites_count():
    cases = census()
    assert len(cases) > 100  # the marks are there: a broken census would give an empty table
    assert readme_table((ROOT / "README.md").read_text()) == table(cases), (
        "refresh it: python tests/test_bad_input_table.py"
    )


if __name__ == "__main__":
    readme = ROOT / "README.md"
    text = readme.read_text()
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    readme.write_text(text[:start] + "\n" + table(census()) + "\n" + text[stop:])
    print("README.md: bad-input table refreshed")
