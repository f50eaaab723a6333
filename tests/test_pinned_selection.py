"""`pytest -m pinned` skips importing the test files that never name the mark (tests/conftest.py
`pytest_ignore_collect`): it must select exactly the tests a full collection selects."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def selected(**env) -> list:
    # --assert=plain: a collection runs no assert, and rewriting every test module's asserts was two thirds of a full
    # collection's time where bytecode is not cached (PYTHONDONTWRITEBYTECODE)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--assert=plain", "--collect-only",
                           "-q", "-m", "pinned"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return sorted(line for line in done.stdout.splitlines() if "::" in line)


def test_the_pinned_lane_collects_what_a_full_collection_selects():
    quick, whole = selected(), selected(ZEROSIM_COLLECT_ALL="1")
    assert len(whole) > 100 and quick == whole
