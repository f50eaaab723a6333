"""The code keeps 120 columns (docs/contributing.md) and pyflakes' basics: ruff, configured in pyproject.toml, finds
nothing.

`python tools/wrap_long_lines.py` brings long lines under the limit without changing any file's syntax tree.
"""

import subprocess
import sys
from pathlib import Path

from helpers import HANG_TIMEOUT

REPO = Path(__file__).resolve().parent.parent


def ruff(*args, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--config", str(REPO / "pyproject.toml"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )


def test_ruff_finds_nothing():
    result = ruff("zerosim", "tests", "benchmarks", "tools")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_ruff_finds_a_line_of_121_columns_and_an_unused_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\nx = " + "1 + " * 28 + "12345\n")  # 121 columns
    assert len(bad.read_text().split("\n")[2]) == 121
    result = ruff(str(bad), cwd=tmp_path)
    assert result.returncode != 0 and "E501" in result.stdout and "F401" in result.stdout
