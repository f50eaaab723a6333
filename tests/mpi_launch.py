"""Launching MPI jobs from tests: a process group per launch, killed whole on timeout, and a probe that
says why MPI tests must be skipped (shared by test_mpi_backend.py and test_mpi_training.py)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import HANG_TIMEOUT

from zerosim.backends.mpi import INSTALL_HINT, find_mpiexec

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "mpi"


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    # The watchdog names a rank that sends nothing for this long; on a starved machine a healthy rank still importing
    # numpy can take a minute, so a test job waits an hour (a test about the watchdog sets its own, after start-up)
    env.setdefault("ZEROSIM_MPI_TIMEOUT", "3600")
    return env


def run(args, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a command in its own process group; on timeout, kill that group (mpiexec and its ranks). `env`: more
    environment variables. The timeout only stops a job that hangs: no test may depend on how fast a job runs."""
    args = [str(a) for a in args]
    proc = subprocess.Popen(args, cwd=REPO, env={**_env(), **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(args)} did not finish within {timeout} s\nstdout:\n{out}\nstderr:\n{err}")
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def launcher_or_skip() -> str:
    """The mpiexec to launch with, once MPI has shown it can start a rank; else skip saying why."""
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip(f"mpi4py is not installed; {INSTALL_HINT}")
    launcher = find_mpiexec()
    if launcher is None:
        pytest.skip(f"no mpiexec next to {sys.executable} or on PATH; {INSTALL_HINT}")
    probe = run(
        [launcher, "-n", "1", sys.executable, "-c", "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"],
        timeout=HANG_TIMEOUT,
    )
    if probe.returncode != 0:
        pytest.skip(f"{launcher} cannot start an mpi4py process (exit {probe.returncode}): "
                    f"{probe.stderr.strip()[-500:]}")
    return launcher
