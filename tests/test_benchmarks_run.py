"""Every benchmark still runs, and its own checks of what it measured (the same bits, the same plan) still hold.

Nothing here reads a time: speed lives in the benchmarks themselves. What rots when a benchmark is never run is the
script, not the number: on 2026-11-29 three of them stopped at their first step (benchmarks/checkpoint.py called the
engine's old `save`, benchmarks/mesh.py passed a flag the command now refuses beside two strategies) or compared
against a yardstick the library had moved past (benchmarks/plan.py's exhaustive search left out the DeepSpeed buckets
the planner counts, and printed "NO" where a wrong plan should fail). Each script runs here in a fresh process at its
smallest settings; its exit status is the verdict (each raises, or exits non-zero, when its own check fails). Marked
heavy: a few minutes in all, so the README's command skips them and CI runs them (`.ci/heavy`).
"""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import HANG_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"

SMALLEST = {  # script -> its smallest settings (one timed round where it allows one)
    "backends.py": ["--repeats", "1"],
    "casts.py": ["--repeats", "5", "--log2-sizes", "12"],  # five turns at least: its own rule
    "checkpoint.py": ["--repeats", "1"],
    "collectives.py": ["--quick", "--repeats", "1"],
    "commands.py": ["--repeats", "1", "--only", "replay,memory,diff"],
    "diff.py": ["--repeats", "1"],
    "engine.py": ["--repeats", "1"],
    "explorer.py": ["--repeats", "1"],
    "gpt.py": ["--repeats", "1"],
    "gpu.py": ["--standin", "--repeats", "1"],  # NumPy in CuPy's place at a toy size
    "hand_zero3.py": ["--repeats", "1"],
    "imports.py": ["--repeats", "1"],
    "long_run.py": ["--steps", "200", "--print-every", "100"],
    "machine.py": [],
    "memory.py": ["--quick"],
    "mesh.py": ["--repeats", "1", "--no-sweep"],
    "meta.py": ["--repeats", "1"],
    "muon.py": ["--repeats", "1"],
    "peers.py": ["--repeats", "1", "--cases", "919k:4"],  # says torch is missing, where it is (the parity lane's)
    "pipeline_meta.py": ["--repeats", "1"],
    "plan.py": ["--repeats", "1"],  # with its exhaustive search: the same ranking both ways, or exit 1
    "plan_jobs.py": ["--repeats", "1"],
    "portable_numbers.py": ["--repeats", "1"],
    "portable_step.py": ["--repeats", "1"],
    "products.py": ["--rounds", "1"],
    "proof_bound.py": ["--repeats", "1"],
    "scaling.py": ["--repeats", "1"],
    "small_floor.py": ["--repeats", "1"],
    "stacked.py": ["--repeats", "1"],
    "timeline.py": ["--repeats", "1"],
    "train_step.py": ["--repeats", "1"],
    "yardstick.py": ["--repeats", "1"],
}
HELPERS = {"trees.py"}  # imported by the scripts, not run (tests/test_benchmark_trees.py holds it)


def test_every_benchmark_has_its_smallest_settings_here():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")} - HELPERS
    assert scripts == set(SMALLEST), (sorted(scripts - set(SMALLEST)), sorted(set(SMALLEST) - scripts))


@pytest.mark.heavy
@pytest.mark.parametrize("script", sorted(SMALLEST))
def test_the_benchmark_runs_and_its_checks_hold(script):
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), *SMALLEST[script]], cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert done.returncode == 0, f"benchmarks/{script} exited {done.returncode}:\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-3000:]}"
