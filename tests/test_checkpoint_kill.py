"""Kill `zerosim train --save D --save-every 1` at random moments; `train --resume D --save D` goes on as if
nothing happened (issue 20, must show 2).

A moment is one of the things the run does that a kill can fall between: each training step, each file a
save writes (killed halfway through writing its temporary file), and each rename (killed just before it, or
just after). An uninterrupted run, instrumented the same way, counts them and is the yardstick; each trial
draws one moment (seeded, without repeats) and the run SIGKILLs itself there — a real SIGKILL, at a moment
chosen by count, not by a clock, so the test means the same on a loaded machine. After each kill:

- the resume starts right after the last complete checkpoint (`latest`'s, or when it names a save that never
  finished, the newest folder with a manifest), and never fails on an incomplete folder;
- its losses are the uninterrupted run's, and when it is done every checkpoint folder in D holds exactly the
  bytes the uninterrupted run wrote (the same state gives the same bytes), with no temporary file left over.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import HANG_TIMEOUT

pytestmark = pytest.mark.slow  # 26 trials, two or three processes each: a test id per trial, ~2 s apiece

STEPS, SEED = 5, 20
KINDS = ("a training step", "rank 0's file half written", "before rank 0's file is renamed", "after it",
         "rank 1's file half written", "before rank 1's file is renamed", "after it", "the manifest half written",
         "before the manifest is renamed", "after it: the checkpoint is complete, `latest` not yet written",
         "`latest` half written", "before `latest` is renamed", "after it")  # the moments of one step, in order
TRAIN = ["train", "--steps", str(STEPS), "--stage", "2", "--ranks", "2", "--widths", "4,8,3", "--batch", "4",
         "--save-every", "1", "--json"]
SAFETY_TIMEOUT = HANG_TIMEOUT  # seconds: reached only by a run that hangs; each run here takes about a second

# The run, instrumented: count the moments, and SIGKILL this process at moment K (K < 0: never; print the count).
KILLER = r"""
import importlib, os, signal, sys
from zerosim.cli.main import main
from zerosim.parallel.data._engine import ZeroEngine

save = importlib.import_module("zerosim.checkpoint._save")  # the module (the package exports a function of that name)
kill_at, seen = int(sys.argv[1]), [0]


def moment(half_write=None):
    if seen[0] == kill_at:
        if half_write is not None:
            half_write()  # the temporary file half written, as a kill mid-write leaves it
        os.kill(os.getpid(), signal.SIGKILL)
    seen[0] += 1


def writer(write, halve):
    def wrapped(path, data):
        moment(lambda: write(path, halve(data)))
        return write(path, data)
    return wrapped


save.write_bytes = writer(save.write_bytes, lambda b: b[: len(b) // 2])
save._write_json = writer(save._write_json, lambda d: {"half": True})
save._write_text = writer(save._write_text, lambda t: t[: len(t) // 2])
replace = os.replace


def replace_at_moments(src, dst):
    moment()
    replace(src, dst)
    moment()


os.replace = replace_at_moments
step = ZeroEngine.step


def step_at_a_moment(self, batches):
    moment()
    return step(self, batches)


ZeroEngine.step = step_at_a_moment
code = main(sys.argv[2:])
if kill_at < 0:
    print(seen[0], file=sys.stderr)
sys.exit(code)
"""


def train(kill_at: int, directory: Path, *flags):
    return subprocess.run([sys.executable, "-c", KILLER, str(kill_at), *TRAIN, "--save", str(directory), *flags],
                          capture_output=True, text=True, timeout=SAFETY_TIMEOUT)


def files(directory: Path) -> dict:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def resumes_from(directory: Path) -> int | None:
    """The step the documented rule resumes after: `latest`'s tag if complete, else the newest folder with a
    manifest; None when no checkpoint is complete."""
    complete = {p.parent.name: json.loads(p.read_text())["iteration"] for p in directory.glob("*/manifest.json")}
    latest = (directory / "latest").read_text().strip() if (directory / "latest").exists() else None
    if latest in complete:
        return complete[latest]
    return max(complete.values()) if complete else None


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    directory = tmp_path_factory.mktemp("uninterrupted") / "ckpt"
    run = train(-1, directory)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)["losses"], files(directory), int(run.stderr.split()[-1])


def kill_moments() -> list:
    """Two seeded random steps for every kind of moment: 26 kills. Not the very last moment (after the final
    `latest` rename, nothing is left to resume)."""
    rng = np.random.default_rng(SEED)
    last = STEPS * len(KINDS) - 1
    moments = []
    for kind in range(len(KINDS)):
        steps = [s for s in rng.permutation(STEPS).tolist() if s * len(KINDS) + kind != last][:2]
        moments += [s * len(KINDS) + kind for s in steps]
    return sorted(moments)


def resumed_after(k: int) -> int:
    """The step a kill at moment k resumes after, by hand from the order of KINDS: nothing before the first
    manifest is renamed (kind 9 of step 1: the newest folder with a manifest, no `latest` yet); after that, the
    step `latest` names, which moves to the new checkpoint only once renamed (kind 12)."""
    step, kind = divmod(k, len(KINDS))  # killed during step `step` + 1 or its save
    if step == 0:
        return 1 if kind >= 9 else 0
    return step + 1 if kind == 12 else step


KILLS = kill_moments()


def test_the_kills_resume_from_scratch_and_after_every_checkpoint_but_the_last():
    assert len(KILLS) == 2 * len(KINDS) and len(set(KILLS)) == len(KILLS)  # two steps for each kind of moment
    assert {resumed_after(k) for k in KILLS} == set(range(STEPS)), KILLS


@pytest.mark.parametrize("k", KILLS, ids=[f"moment{k:02d}" for k in KILLS])
def test_killed_at_random_moments_the_run_resumes_and_continues_bit_for_bit(uninterrupted, tmp_path, k):
    losses, saved, moments = uninterrupted
    assert moments == STEPS * len(KINDS)  # the instrumented run met every moment the kills are drawn from
    what = f"killed at moment {k}: step {k // len(KINDS) + 1}, {KINDS[k % len(KINDS)]}"
    directory = tmp_path / "ckpt"
    killed = train(k, directory)
    assert killed.returncode == -9, f"{what}: {killed.stderr[-2000:]}"
    start = resumes_from(directory)
    assert (start or 0) == resumed_after(k), (what, start)
    if start is None:  # killed before the first checkpoint was complete: nothing to resume, and it says so
        refused = train(-1, directory, "--resume", str(directory))
        said = ("no such folder" if not directory.exists() else "no checkpoint here") in refused.stderr
        assert refused.returncode == 2 and said, f"{what}: {refused.stderr}"
        again = train(-1, directory)  # the run started again saves into D, over what the kill left
    else:
        again = train(-1, directory, "--resume", str(directory))
    assert again.returncode == 0, f"{what}: the run after the kill failed: {again.stderr[-2000:]}"
    out = json.loads(again.stdout)
    start = start or 0
    assert out["first_step"] == start + 1, what
    assert out["losses"] == losses[start:], f"{what}: the losses differ from the uninterrupted run's"
    assert files(directory) == saved, f"{what}: the checkpoints differ from the uninterrupted run's"
