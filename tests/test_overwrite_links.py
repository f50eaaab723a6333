"""Issue 56, item 2: `--overwrite` never follows a symbolic link and removes only what zerosim wrote; two saves of one
run into one folder at once are made safe (one at a time: an advisory lock on the folder, checkpoint/_folders.py).

On main: with `C/step000006 -> ../B/step000006`, `train --save C --overwrite` deleted every file of B's newest tag
(then failed with a raw `[Errno 20]`), and `--resume B` went on silently from the older tag; `--overwrite` deleted any
`rank*.safetensors*` name in another run's tag; four processes saving the same run into one folder failed with
`[Errno 2] .../latest` (one removed the others' temporary files).
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import HANG_TIMEOUT, files_of, run_cli

from zerosim import MLP, Adam, Cluster, ZeroEngine
from zerosim import checkpoint as ckpt
from zerosim.checkpoint import _folders as folders
from zerosim.models import make_regression

TRAIN = ("train", "--widths", "4,6,3", "--ranks", "2", "--print-every", "100")


@pytest.fixture()
def run_b(tmp_path):
    """Run B's checkpoints at steps 3 and 6 (`latest` names step 6)."""
    assert run_cli(*TRAIN, "--steps", "6", "--save", tmp_path / "B", "--save-every", "3")[0] == 0
    return tmp_path / "B"


@pytest.mark.bad_input("checkpoint commands", unchanged=True)
def test_overwrite_never_removes_through_a_linked_tag(run_b, tmp_path):
    (tmp_path / "C").mkdir()
    os.symlink("../B/step000006", tmp_path / "C" / "step000006")
    before_b, before_c = files_of(run_b), files_of(tmp_path / "C")
    code, _, err = run_cli(*TRAIN, "--steps", "6", "--seed", "3", "--save", tmp_path / "C", "--overwrite")
    assert code == 2 and "C/step000006: a symbolic link (to ../B/step000006)" in err and "Errno" not in err
    assert files_of(run_b) == before_b and files_of(tmp_path / "C") == before_c
    code, out, _ = run_cli(*TRAIN, "--steps", "7", "--resume", run_b, "--json")
    assert code == 0 and '"first_step": 7' in out  # B still resumes from its newest tag


@pytest.mark.bad_input("checkpoint commands", unchanged=True)
def test_overwrite_never_removes_through_a_linked_folder(run_b, tmp_path):
    os.symlink("B", tmp_path / "Blink")
    before = files_of(run_b)
    code, _, err = run_cli(*TRAIN, "--steps", "6", "--seed", "3", "--save", tmp_path / "Blink", "--overwrite")
    assert code == 2 and "Blink is a symbolic link (to B)" in err and "never removes files through a link" in err
    assert files_of(run_b) == before


@pytest.mark.bad_input("checkpoint files", unchanged=True)
def test_a_linked_tag_is_neither_loaded_nor_listed(run_b, tmp_path):
    (tmp_path / "C").mkdir()
    os.symlink("../B/step000006", tmp_path / "C" / "step000006")
    (tmp_path / "C" / "latest").write_text("step000006\n")
    with pytest.raises(ckpt.CheckpointError, match=r"C/latest names 'step000006': .*C/step000006: a symbolic link"):
        ckpt.load(str(tmp_path / "C"), Cluster(2), MLP([4, 6, 3]))
    with pytest.raises(ckpt.CheckpointError, match=r"C/step000006: a symbolic link"):
        ckpt.load(str(tmp_path / "C"), Cluster(2), MLP([4, 6, 3]), tag="step000006")
    assert folders.complete_tags(str(tmp_path / "C")) == []


@pytest.mark.bad_input("checkpoint commands")
def test_overwrite_removes_only_the_files_the_manifests_list(run_b, tmp_path):
    mine = run_b / "step000003" / "notes.txt"
    mine.write_text("the user's notes\n")  # not zerosim's: kept
    (tmp_path / "outside.txt").write_text("the user's file\n")
    os.symlink(tmp_path / "outside.txt", run_b / "step000006" / "rank00009.safetensors")  # a link, not a rank file
    (run_b / "step000006" / "rank00000.safetensors.bak").write_text("a copy the user made\n")  # was: removed
    assert run_cli(*TRAIN, "--steps", "2", "--seed", "5", "--save", run_b, "--overwrite")[0] == 0
    left = sorted(str(p.relative_to(run_b)) for p in run_b.rglob("*") if p.is_file() or p.is_symlink())
    assert left == ["latest", "step000002/manifest.json", "step000002/rank00000.safetensors",
                    "step000002/rank00001.safetensors", "step000003/notes.txt", "step000006/rank00000.safetensors.bak",
                    "step000006/rank00009.safetensors"]
    assert (tmp_path / "outside.txt").read_text() == "the user's file\n"


def _engine():
    engine = ZeroEngine(MLP([4, 6, 3]), Cluster(2), 2, Adam(lr=1e-2), "bf16-mixed")
    engine.step(make_regression(np.random.default_rng(0), 2, 3, [4, 6, 3]))
    return engine


@pytest.mark.bad_input("checkpoint commands", unchanged=True)
def test_a_save_waits_for_another_save_into_its_folder(tmp_path, monkeypatch):
    engine = _engine()
    ckpt.save(engine, str(tmp_path))
    before = files_of(tmp_path)
    monkeypatch.setattr(folders, "LOCK_WAIT", 0.2)
    with folders.save_lock(str(tmp_path)):  # another save holds the folder (flock: another open file description)
        engine.step(make_regression(np.random.default_rng(1), 2, 3, [4, 6, 3]))
        with pytest.raises(ckpt.CheckpointError, match="another process has been saving into it for 0.2 s"):
            ckpt.save(engine, str(tmp_path))
    assert files_of(tmp_path) == before
    ckpt.save(engine, str(tmp_path))  # the lock released: saved
    assert folders.read_latest(str(tmp_path)) == "step000002"


SAVES = textwrap.dedent("""
    import sys
    from zerosim.train import TrainConfig, train
    try:
        train(TrainConfig(widths=(4, 6, 3), ranks=2, steps=25, save=sys.argv[1], save_every=1))
    except ValueError as e:  # a clear refusal, before its first step: the folder already held the first save
        print("refused:", e)
    else:
        print("ok")
""")


@pytest.mark.slow  # four processes train and save 25 steps each into one folder at once
def test_four_processes_saving_one_run_into_one_folder_all_finish(tmp_path):
    # A process that checks the folder after another's first save is a new run to it (a run's id comes from its
    # first save) and is refused before its first step, clearly; the others save the same bytes, one at a time.
    folder = tmp_path / "CC"
    procs = [subprocess.Popen([sys.executable, "-c", SAVES, str(folder)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=HANG_TIMEOUT) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-400:] for _, err in outs]  # was: [Errno 2] .../latest
    said = [out.strip() for out, _ in outs]
    assert "ok" in said and all(s == "ok" or s.startswith("refused: ") and "holds the checkpoints of another run"
                                in s and "Nothing was written" in s for s in said), said
    assert folders.complete_tags(str(folder)) == [f"step{s:06d}" for s in range(1, 26)]
    assert not [n for n in os.listdir(folder) if ".tmp-" in n]
    loaded = ckpt.load(str(folder), Cluster(2), MLP([4, 6, 3]))
    assert loaded.iteration == 25
