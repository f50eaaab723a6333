"""benchmarks/commands.py, the CPU time of the text commands a user waits for: it refuses a command it does not know
by the flag and the name before running anything, and each run hands back the bytes the command printed (what the
two trees are compared by). No test here times anything (speed lives in benchmarks)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import commands  # noqa: E402


def test_an_unknown_command_is_refused_by_its_flag_and_name():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "commands.py"), "--only", "replay,nope"],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "argument --only: no command nope" in done.stderr and done.stdout == ""


def test_a_run_hands_back_what_the_command_printed():
    seconds, out = commands.run(str(ROOT), ["replay", "--help"])
    expected = subprocess.run([sys.executable, "-m", "zerosim.cli.main", "replay", "--help"], cwd=ROOT,
                              capture_output=True).stdout
    assert out == expected and out.startswith(b"usage: zerosim replay") and seconds > 0
