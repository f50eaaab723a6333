"""The MPI backend, run for real: scripts in tests/mpi/ under `mpiexec -n 2` and `-n 4`.

Each launch is a subprocess with a generous timeout that only stops a job that hangs (a slow or oversubscribed
machine must not fail a test). No test measures time: a job that must end at once runs with the watchdog set to
an hour, so if it waited on the watchdog instead it would hang into that timeout and fail.
Skipped, with the reason, when mpi4py or mpiexec is missing. `import zerosim` without mpi4py is
tested always.
"""

from __future__ import annotations

import sys

import pytest
from helpers import HANG_TIMEOUT
from mpi_launch import SCRIPTS, launcher_or_skip, run

from zerosim.backends.mpi import INSTALL_HINT

RUN_TIMEOUT = HANG_TIMEOUT  # a whole check script takes ~10 s on two cores at N = 4 (only a hang reaches it)
NO_WATCHDOG = {"ZEROSIM_MPI_TIMEOUT": "3600"}  # a job that ends only by the watchdog would hang into RUN_TIMEOUT

pytestmark = [pytest.mark.mpi, pytest.mark.slow]  # every test launches mpiexec


@pytest.fixture(scope="module")
def mpiexec() -> str:
    return launcher_or_skip()


def test_zerosim_imports_without_mpi4py():
    """Blocking mpi4py: zerosim and the simulator still work; asking for "mpi" says what to install."""
    code = (
        "import sys; sys.modules['mpi4py'] = None\n"  # makes `import mpi4py` raise ImportError
        "import numpy as np, zerosim\n"
        "assert zerosim.all_reduce(zerosim.Cluster(2), [np.ones(3, np.float32)] * 2)[0].tolist() == [2, 2, 2]\n"
        "try:\n"
        "    zerosim.Cluster(2, backend='mpi')\n"
        "except ImportError as e:\n"
        "    print(e)\n"
        "else:\n"
        "    sys.exit('no ImportError')\n"
    )
    result = run([sys.executable, "-c", code], timeout=RUN_TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert INSTALL_HINT in result.stdout


@pytest.mark.bad_input("MPI jobs")
def test_world_size_must_equal_the_number_of_processes(mpiexec):
    code = (
        "from zerosim import Cluster\n"
        "try:\n"
        "    Cluster(4, backend='mpi')\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    result = run([mpiexec, "-n", "2", sys.executable, "-c", code], timeout=RUN_TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("Cluster(4, backend='mpi') but mpiexec started 2 processes") == 2, result.stdout


@pytest.mark.parametrize("n", [2, 4])
def test_collectives_equal_the_simulator_bit_for_bit(mpiexec, n):
    result = run([mpiexec, "-n", str(n), sys.executable, str(SCRIPTS / "collectives_check.py")], timeout=RUN_TIMEOUT)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert f"collectives_check: N={n}:" in result.stdout and "all passed" in result.stdout, result.stdout


@pytest.mark.parametrize("mode", ["hook", "guarded"])
def test_a_failing_rank_ends_the_whole_job(mpiexec, mode):
    """Rank 1 raises at ring step 2 of an all-reduce while ranks 0, 2, 3 wait on it: the job must end."""
    result = run([mpiexec, "-n", "4", sys.executable, str(SCRIPTS / "failing_rank.py"), mode], timeout=RUN_TIMEOUT,
                 env=NO_WATCHDOG)
    assert result.returncode != 0
    assert "zerosim: rank 1 failed: RuntimeError: injected failure at ring step 2" in result.stderr, result.stderr
    assert "finished, which it must not" not in result.stderr


@pytest.mark.bad_input("MPI jobs")
def test_a_silent_rank_is_named_by_the_watchdog(mpiexec):
    """Rank 1 stops answering (SIGSTOP) before an all-reduce: with a 2 s watchdog the job ends, naming it, and
    does not hang (RUN_TIMEOUT would end the test, failing)."""
    timeout = 2.0
    result = run([mpiexec, "-n", "3", sys.executable, str(SCRIPTS / "silent_rank.py"), str(timeout)],
                 timeout=RUN_TIMEOUT)
    assert result.returncode != 0
    assert "SilentRank: rank 1 has not answered for 2 s" in result.stderr, result.stderr
    assert "finished, which it must not" not in result.stderr


@pytest.mark.bad_input("MPI jobs")
def test_ranks_that_disagree_on_an_argument_are_told_which(mpiexec):
    result = run([mpiexec, "-n", "2", sys.executable, str(SCRIPTS / "disagreeing_ranks.py")], timeout=RUN_TIMEOUT,
                 env=NO_WATCHDOG)
    assert result.returncode != 0
    assert "the ranks disagree on steps (--steps): rank 0 has 3, rank 1 has 5" in result.stderr, result.stderr
    assert "peak_by_kind" not in result.stderr + result.stdout  # not a dump of the statistics
