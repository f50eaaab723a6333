"""ZeRO training on the MPI backend gives the simulator's numbers, bit for bit (issue 4, items 1 and 3).

- tests/mpi/training_check.py under `mpiexec -n 2` and `-n 4`: stages 0-3 x fp32 / fp16-mixed /
  bf16-mixed x Adam / Adan x checkpointing off / on (and variants: the frameworks' gradient recipes,
  NCCL's all-reduce chunk map, dynamic loss scaling with overflows injected on one rank, gradient
  clipping), 3 steps each, every rank comparing its loss, fp32 master shard, optimizer state, 16-bit
  params, step count, loss-scaler state and decisions, clipped norms, trace and ledger with the numpy
  simulator's.
- `zerosim train --backend mpi` under `mpiexec -n 4` prints exactly what `zerosim train --backend
  numpy --ranks 4` prints: the same "step N loss X" lines, the same per-rank memory and bytes table,
  and with --json the same losses and per-rank statistics.

Each launch is a subprocess in its own process group, killed whole on timeout; the timeouts are
generous (a slow or oversubscribed machine must not fail a test). Skipped, with the reason, when
mpi4py or mpiexec is missing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from helpers import HANG_TIMEOUT
from mpi_launch import SCRIPTS, launcher_or_skip, run

RUN_TIMEOUT = HANG_TIMEOUT  # training_check takes ~3 s at N = 2 and ~12 s at N = 4 on two cores (a hang only)
CLI = [sys.executable, "-m", "zerosim.cli.main", "train"]
STEP_LINE = re.compile(r"^step\s+(\d+)\s+loss\s+(\S+)$")

pytestmark = [pytest.mark.mpi, pytest.mark.slow]  # every test launches mpiexec


def _ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (
        f"{' '.join(result.args)} exited {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result.stdout


@pytest.fixture(scope="module")
def mpiexec() -> str:
    return launcher_or_skip()


# -- item 1: training steps of every stage, compared rank by rank -------------------------------------
@pytest.mark.parametrize("n", [2, 4])
def test_training_equals_the_simulator_bit_for_bit(mpiexec, n):
    stdout = _ok(run([mpiexec, "-n", n, sys.executable, SCRIPTS / "training_check.py"], RUN_TIMEOUT))
    summary = re.search(rf"training_check: N={n}: (\d+) checks on each rank, all passed", stdout)
    assert summary, stdout
    assert int(summary.group(1)) > 1000, stdout  # the whole grid ran, not an early exit


# -- issue 22, must show 3: the strategies for many nodes on a 2 × 2 mesh -------------------------------------------
def test_a_2_by_2_mesh_under_mpiexec_equals_the_simulator_bit_for_bit(mpiexec):
    """HSDP (and without all-reduce until the last micro-step), hpZ, MiCS (flat and hierarchical gathers), FSDP2's
    reshard_after_forward False and 2: four processes, two per node (tests/mpi/mesh_check.py)."""
    stdout = _ok(run([mpiexec, "-n", 4, sys.executable, SCRIPTS / "mesh_check.py"], RUN_TIMEOUT))
    summary = re.search(r"mesh_check: N=4: (\d+) checks on each rank, all passed", stdout)
    assert summary, stdout
    assert int(summary.group(1)) > 250, stdout  # every configuration ran, step by step


# -- item 3: the command line, mpi against numpy ---------------------------------------------------------
def _train_both(mpiexec, n: int, options: list) -> tuple:
    """(stdout of `mpiexec -n N zerosim train --backend mpi ...`, stdout of
    `zerosim train --backend numpy --ranks N ...`)."""
    mpi = _ok(run([mpiexec, "-n", n, *CLI, "--backend", "mpi", *options], RUN_TIMEOUT))
    sim = _ok(run([*CLI, "--backend", "numpy", "--ranks", n, *options], RUN_TIMEOUT))
    return mpi, sim


def _header_and_rest(stdout: str, backend: str, n: int) -> tuple:
    header, _, rest = stdout.partition("\n")
    assert header.startswith("zerosim train: ") and f"{n} ranks on {backend}," in header, stdout
    return header.replace(f"on {backend},", "on <backend>,"), rest


@pytest.mark.parametrize(
    "options",
    [
        ["--stage", "3", "--precision", "bf16-mixed", "--optimizer", "adam", "--widths", "5,6,3"],
        ["--stage", "1", "--precision", "fp16-mixed", "--optimizer", "adan", "--widths", "4,3,3,2", "--checkpoint"],
    ],
    ids=["stage3-bf16-adam", "stage1-fp16-adan-checkpoint"],
)
def test_train_command_prints_the_simulators_losses(mpiexec, options):
    """The "step N loss X" lines are identical strings, and so is the per-rank peak memory / bytes table."""
    n, steps = 4, 6
    args = [*options, "--steps", steps, "--print-every", 1, "--batch", 8, "--seed", 3]
    mpi, sim = _train_both(mpiexec, n, args)
    mpi_header, mpi_rest = _header_and_rest(mpi, "mpi", n)
    sim_header, sim_rest = _header_and_rest(sim, "numpy", n)
    assert mpi_header == sim_header
    mpi_steps = [line for line in mpi_rest.splitlines() if STEP_LINE.match(line)]
    sim_steps = [line for line in sim_rest.splitlines() if STEP_LINE.match(line)]
    assert [int(STEP_LINE.match(line).group(1)) for line in sim_steps] == list(range(1, steps + 1)), sim
    assert mpi_steps == sim_steps
    assert mpi_rest == sim_rest  # the memory / bytes table too, and nothing printed twice by other ranks


@pytest.mark.parametrize(
    "options",
    [
        ["--stage", "0", "--precision", "fp32", "--optimizer", "adam", "--widths", "5,6,3", "--checkpoint"],
        ["--stage", "2", "--precision", "bf16-mixed", "--optimizer", "adan", "--widths", "4,3,3,2"],
        [
            "--stage",
            "3",
            "--precision",
            "fp16-mixed",
            "--optimizer",
            "adam",
            "--widths",
            "5,6,3",
            "--task",
            "classification",
            "--checkpoint",
        ],
        [
            "--stage",
            "3",
            "--precision",
            "fp16-mixed",
            "--widths",
            "5,6,3",
            "--loss-scale",
            "torch",
            "--clip-grad",
            "0.1",
            "--reduction",
            "fsdp2",
        ],
    ],
    ids=[
        "stage0-fp32-adam-checkpoint",
        "stage2-bf16-adan",
        "stage3-fp16-adam-classification-checkpoint",
        "stage3-fp16-dynamic-clip-fsdp2",
    ],
)
def test_train_command_json_equals_the_simulators(mpiexec, options):
    """--json: the same losses and, for every rank, the same bytes sent and peak memory (in total and by kind)."""
    n, steps = 4, 4
    mpi_json, sim_json = _train_both(mpiexec, n, [*options, "--steps", steps, "--json", "--batch", 8])
    got, want = json.loads(mpi_json), json.loads(sim_json)  # stdout is JSON alone: no header before it
    assert len(want["losses"]) == steps and [s["rank"] for s in want["ranks"]] == list(range(n)), sim_json
    assert all(s["bytes_sent"] > 0 and s["peak_bytes"] > 0 for s in want["ranks"]), sim_json
    assert got["losses"] == want["losses"]  # floats parsed from their shortest repr: equal iff bitwise equal
    for g, w in zip(got["ranks"], want["ranks"], strict=True):
        assert (g["rank"], g["bytes_sent"], g["peak_bytes"], g["peak_by_kind"]) == (
            w["rank"],
            w["bytes_sent"],
            w["peak_bytes"],
            w["peak_by_kind"],
        )
    assert mpi_json == sim_json  # and the very same text


@pytest.mark.bad_input("MPI jobs", unchanged=True)
def test_bad_input_on_one_rank_stops_every_rank(mpiexec):
    out = _ok(run([mpiexec, "-n", 2, sys.executable, SCRIPTS / "agreement_check.py"], RUN_TIMEOUT))
    for r in (0, 1):
        assert f"rank {r}: ValueError: rank 1: the micro-batch input contains NaN or inf; nothing was run" in out, out
        line = next(l for l in out.splitlines() if l.startswith(f"rank {r}: FloatingPointError: "))
        assert "no parameter or optimizer state was changed" in line, out
    lines = [l.split(": ", 1)[1] for l in out.splitlines() if "FloatingPointError" in l]
    assert len(lines) == 2 and lines[0] == lines[1], out  # both ranks decided together, with the same verdict
    assert "no error" not in out, out


@pytest.mark.parametrize("n", [2])
def test_a_resumed_mpi_run_equals_the_uninterrupted_simulator(mpiexec, n, tmp_path):
    stdout = _ok(run([mpiexec, "-n", n, sys.executable, SCRIPTS / "checkpoint_check.py", tmp_path], RUN_TIMEOUT))
    summary = re.search(rf"checkpoint_check: N={n}: (\d+) checks on each rank, all passed", stdout)
    # 4 stages x 2 precisions x (2 losses, master, params, m, v)
    assert summary and int(summary.group(1)) >= 8 * 6, stdout
