"""The README runs as written: every shell command, in order, from a fresh shell, in a fresh copy of the project.

What a new user does: copy the project, paste the quick start (which makes `.venv`), then paste each
later command into a *new* shell (no activated environment, nothing on PATH from us). Blocks marked
`<!-- not run here: ... -->` (the GPU suite: no GPU on this machine) are listed, not run. The README's
Python snippet runs too, and its first losses must be of order one (a student that is not its teacher).

The test command of the quick start runs the whole suite again inside the copy; that inner run skips
this test (ZEROSIM_README_RUN is set), so it does not recurse.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INNER = "ZEROSIM_README_RUN"

pytestmark = pytest.mark.skipif(os.environ.get(INNER) == "1", reason="the README's own test command is running this "
                                                                     "suite")


def readme_blocks(text: str) -> list:
    """[(language, code, runnable)] for every fenced block, in order."""
    blocks = []
    for m in re.finditer(r"(<!-- not run here[^>]*-->\s*)?```(\w+)\n(.*?)```", text, re.S):
        blocks.append((m.group(2), m.group(3), m.group(1) is None))
    return blocks


def fresh_copy(dest: Path) -> Path:
    """The project's files as a clone of this working tree would hold them (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True
    )
    files = listed.stdout.split() if listed.returncode == 0 and listed.stdout else None
    if files is None:  # not a git checkout: everything but environments and caches
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info"))
        return dest
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, dest / f)
    return dest


def user_env() -> dict:
    """A new shell's environment: PATH without this interpreter's virtual environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "HYPOTHESIS_PROFILE")}
    here = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != here)
    env[INNER] = "1"
    return env


def test_every_readme_command_runs_as_written(tmp_path):
    text = (ROOT / "README.md").read_text()
    project = fresh_copy(tmp_path / "project")
    env = user_env()
    ran, not_run = [], []
    for lang, code, runnable in readme_blocks(text):
        if lang != "bash":
            continue
        for line in code.strip().splitlines():
            if not runnable:
                not_run.append(line)
                continue
            result = subprocess.run(
                ["bash", "-c", line], cwd=project, env=env, capture_output=True, text=True, timeout=900
            )
            assert result.returncode == 0, (
                f"README command failed: {line}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
            ran.append((line, result.stdout))
    assert len(ran) >= 6, ran  # the quick start's two, memory, figures, the MPI install and run
    main_out = ran[0][1]
    assert "copy is really 2.099609375" in main_out  # the quick start's main job told the seed's fp16 truth
    assert (project / "figures" / "memory_by_stage.png").exists()
    assert all("gpu" in line for line in not_run)  # only the GPU suite is left out, and it is marked


def test_the_readme_python_snippet_starts_unsolved(tmp_path):
    # The snippet's student (MLP.init_params, seed 0) must not be its teacher (make_regression's rng),
    # or step 1's losses are ~1e-5 and the example teaches nothing; targets of a random teacher give ~1.
    (snippet,) = [code for lang, code, _ in readme_blocks((ROOT / "README.md").read_text()) if lang == "python"]
    result = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # its first print: the engine's and the oracle's per-rank losses, "[a, b, c, d] [a, b, c, d]"
    engine_losses, oracle_losses = (
        json.loads(part) for part in re.findall(r"\[[^\]]*\]", result.stdout.splitlines()[0])
    )
    assert engine_losses == oracle_losses
    assert all(0.1 < loss < 100 for loss in engine_losses), engine_losses
