"""How the command line ends: Ctrl-C, a reader that leaves the pipe, JSON for scripts, bad sizes refused at once.

These run the installed `zerosim` entry point in a subprocess, as a user's shell would.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from mpi_launch import launcher_or_skip

ZEROSIM = [sys.executable, "-m", "zerosim.cli.main"]


def interrupt_after_first_step(cmd):
    """Start `cmd`, wait for its first "step" line, send SIGINT; (return code, stderr)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    for line in p.stdout:
        if line.startswith("step") or time.monotonic() > deadline:
            break
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    return p.returncode, err


def test_ctrl_c_exits_130_with_one_line():
    code, err = interrupt_after_first_step([*ZEROSIM, "train", "--steps", "1000000", "--print-every", "1"])
    assert code == 130
    assert err == "zerosim train: interrupted\n"  # one line, no traceback


@pytest.mark.mpi
def test_ctrl_c_under_mpiexec_exits_130_with_one_line_from_one_rank():
    mpiexec = launcher_or_skip()
    code, err = interrupt_after_first_step(
        [mpiexec, "-n", "2", *ZEROSIM, "train", "--backend", "mpi", "--steps", "1000000", "--print-every", "1"]
    )
    assert code == 130
    assert err.count("zerosim train: interrupted") == 1 and "Traceback" not in err, err


def test_a_reader_that_leaves_the_pipe_is_not_an_error():
    # `zerosim replay --json | head -1`: zerosim must exit 0 and say nothing on stderr
    shell = f"set -o pipefail; {' '.join(ZEROSIM)} replay --json --steps 40 | head -1"
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "{\n" and result.stderr == ""


def test_train_json_is_json_alone():
    result = subprocess.run([*ZEROSIM, "train", "--steps", "3", "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and len(json.loads(result.stdout)["losses"]) == 3  # json.loads of all of stdout


@pytest.mark.parametrize("args, message", [
    (["--widths", "100000,100000,4"], "10,000,500,004 parameters on 4 rank(s) in this process"),
    (["--batch", "10000000"], "the data pool (4 micro-batches of 10,000,000 samples)"),
    (["--ranks", "1000000"], "on 1,000,000 rank(s) in this process"),
])
@pytest.mark.bad_input("sizes that cannot fit", unchanged=True)
def test_sizes_that_cannot_fit_are_refused_at_once(args, message):
    result = subprocess.run([*ZEROSIM, "train", "--steps", "1", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert message in result.stderr and "this machine has" in result.stderr and "GB available" in result.stderr, (
        result.stderr
    )
    assert "Traceback" not in result.stderr


def _run_with_terminal_stderr(cmd):
    """Run `cmd` with stderr on a pseudo-terminal (as in a user's shell); (return code, what it wrote there)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a size: 100 columns
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    p.wait(timeout=120)
    os.close(master)
    return p.returncode, b"".join(chunks).decode(errors="replace")


def test_long_runs_show_progress_on_a_terminal_and_nothing_otherwise():
    cmd = [*ZEROSIM, "memory", "--model", "gpt2-small", "--ranks", "8"]
    code, terminal = _run_with_terminal_stderr(cmd)
    assert code == 0 and "params on 8 ranks" in terminal and "stage" in terminal  # tqdm's bar, by stage
    quiet = subprocess.run(cmd, capture_output=True, text=True, timeout=120)  # stderr is a pipe: a script
    assert quiet.returncode == 0 and quiet.stderr == ""
    code, terminal = _run_with_terminal_stderr([*cmd, "--json"])
    assert code == 0 and terminal == ""  # --json is for machines: no bar even on a terminal
