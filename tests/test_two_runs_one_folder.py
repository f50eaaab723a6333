"""Two runs, one checkpoint folder: seeded trials (issue 35, must show 2; the slow lane).

Each trial trains run A into a folder D (`zerosim train --save D`), then run B at D, drawn from five kinds:

    another run        another seed, learning rate, stage or rank count, fresh   refused before writing
    the same command   A's command again, fresh (a new run: resume it instead)  refused before writing
    A resumed          --resume D --save D, maybe resharded                      saves on: it is A
    A resumed, killed  as above, SIGKILLed at a drawn moment of its saves, then resumed again
    overwrite          another run with --overwrite                              D becomes B's

and checks that every file of D kept its bytes when B was refused, and that the run D holds — resumed to the end —
equals its uninterrupted twin (in a folder of its own) loss for loss and file for file. Kills use
test_checkpoint_kill's instrumented process (a real SIGKILL at a moment chosen by count, not by a clock)."""

import io
import json
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from helpers import HANG_TIMEOUT
from test_checkpoint_kill import KILLER

from zerosim.cli.main import main

pytestmark = pytest.mark.slow  # ~15 trials of a few small runs each

BASE = ["train", "--widths", "4,8,3", "--batch", "4", "--json"]
KINDS = ("another run", "the same command", "A resumed", "A resumed, killed", "overwrite")
TRIALS, SEED = 15, 35


def train(*argv) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([*BASE, *map(str, argv)])
    return code, (json.loads(out.getvalue()) if code == 0 else None), err.getvalue()


def killed(moment: int, *argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", KILLER, str(moment), *BASE, *map(str, argv)], capture_output=True,
                          text=True, timeout=HANG_TIMEOUT)


def files(directory: Path) -> dict:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def trials() -> list:
    rng = np.random.default_rng(SEED)
    out = []
    for t in range(TRIALS):
        kind = KINDS[t % len(KINDS)]  # each kind three times, its settings drawn
        stage, ranks = int(rng.integers(0, 4)), int(rng.integers(1, 4))
        a_steps, every = int(rng.integers(2, 5)), int(rng.integers(1, 3))
        other = rng.choice(["--seed 9", "--lr 0.05", f"--stage {(stage + 1) % 4}", f"--ranks {ranks % 3 + 1}"])
        out.append((kind, stage, ranks, a_steps, every, str(other).split(), int(rng.integers(0, 10**6))))
    return out


@pytest.mark.parametrize("trial", range(TRIALS))
def test_two_runs_one_folder(trial, tmp_path):
    kind, stage, ranks, a_steps, every, other, draw = trials()[trial]
    total = a_steps + 2
    run_a = ["--stage", stage, "--ranks", ranks, "--save-every", every]
    d = tmp_path / "D"
    data = []
    code, _, err = train(*run_a, "--steps", a_steps, "--save", d)
    assert code == 0, err
    before = files(d)
    if kind in ("another run", "the same command"):
        b = [*run_a, *other] if kind == "another run" else run_a
        code, _, err = train(*b, "--steps", total, "--save", d)
        assert code == 2 and "holds the checkpoints of another run" in err and err.count("\n") == 1, (kind, err)
        assert files(d) == before, f"{kind}: a file of run A changed"  # byte for byte
        owner, twin_args = run_a, run_a
    elif kind == "overwrite":
        code, _, err = train(*run_a, *other, "--steps", a_steps, "--save", d, "--overwrite")
        assert code == 0, err
        owner = twin_args = [*run_a, *other]
        data = other  # a resume of B gives B's --seed (the resume rule: the data is the caller's to give again)
    else:  # A resumed (the same run), maybe resharded; maybe killed at a drawn moment of its saves
        reshard = ["--ranks", ranks % 3 + 1] if draw % 2 else []
        b = ["--steps", a_steps + 1, "--save-every", every, *reshard]
        if kind == "A resumed, killed":
            moments = int(killed(-1, *b, "--resume", d, "--save", tmp_path / "count").stderr.split()[-1])
            assert killed(draw % moments, *b, "--resume", d, "--save", d).returncode == -9
        code, _, err = train(*b, "--resume", d, "--save", d)  # (again, after a kill: what the user would do)
        assert code == 0 or "asks for no more" in err, (kind, err)
        owner, twin_args = run_a, None
    # the run D holds, resumed to the end, is its uninterrupted twin's
    code, resumed, err = train("--steps", total, "--resume", d, "--save", d, "--save-every", every, *data)
    assert code == 0, (kind, err)
    twin = tmp_path / "twin"
    if twin_args is not None:
        code, whole, _ = train(*twin_args, "--steps", total, "--save", twin)
    else:  # the same history without the kill: A, then the resharded step, then on to the end
        assert train(*run_a, "--steps", a_steps, "--save", twin)[0] == 0
        assert train(*b, "--resume", twin, "--save", twin)[0] == 0
        code, whole, _ = train("--steps", total, "--resume", twin, "--save", twin, "--save-every", every)
        whole["losses"] = [None] * (whole["first_step"] - 1) + whole["losses"]
    assert code == 0
    assert resumed["losses"] == whole["losses"][resumed["first_step"] - 1:], kind
    last = f"step{total:06d}"
    assert files(d / last) == files(twin / last), f"{kind}: the last checkpoint differs from its twin's"
    manifests = [json.loads(p.read_text()) for p in d.glob("*/manifest.json")]
    assert len({m["run"]["id"] for m in manifests}) == 1, f"{kind}: D holds checkpoints of two runs"
    assert (d / "latest").read_text().strip() == f"step{total:06d}"
    assert owner is not None
