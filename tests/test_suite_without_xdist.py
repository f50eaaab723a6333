"""The suite runs where pytest-xdist is not installed (a contributor's plain `pytest`, the torch parity lane's
venv): tests/conftest.py's scheduler hook is xdist's own, so it is declared optional, and pytest refuses an unknown
hook ("unknown hook 'pytest_xdist_make_scheduler'") before it collects a single test."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_suite_collects_with_xdist_switched_off():
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "--collect-only",
                           "-q", "tests/test_cli_choices.py"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "tests collected" in done.stdout or "test_cli_choices.py::" in done.stdout
