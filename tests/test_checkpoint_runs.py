"""Issue 35, item 2: a checkpoint folder belongs to one run (zerosim/checkpoint/_runs.py).

On main a second run saving into a folder of another run's checkpoints wrote its steps 1-2, moved `latest` to them,
was refused at step 3 ("nothing was written"), and the next `--resume` continued the second run from step 2 as if it
were the first. Here such a save is refused before anything is written, naming both runs; every file of the first
run keeps its bytes; and the first run, resumed, goes on exactly as its uninterrupted twin does. `--overwrite` hands
the folder over (the other run's tags and `latest` go, other files stay); a resumed run — resharded or not — saves on
into its own folder."""

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from helpers import as_version_1

from zerosim import MLP, Adam, Cluster, ZeroEngine
from zerosim import checkpoint as checkpoints
from zerosim.cli.main import main
from zerosim.models import make_regression

TRAIN = ["train", "--widths", "4,8,3", "--ranks", "2", "--stage", "2", "--batch", "4", "--json"]


def train(*argv) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([*TRAIN, *map(str, argv)])
    return code, (json.loads(out.getvalue()) if code == 0 else None), err.getvalue()


def snapshot(root) -> dict:
    root = Path(root)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture()
def first_run(tmp_path):
    """Run A: 6 steps, checkpoints at steps 3 and 6 (seed 0); its uninterrupted losses to 9 steps, for the twin."""
    ck = tmp_path / "CK"
    code, out, err = train("--steps", 6, "--save", ck, "--save-every", 3)
    assert code == 0, err
    return ck


@pytest.mark.bad_input("checkpoint commands", unchanged=True)
def test_a_second_run_is_refused_before_anything_is_written_and_the_first_resumes_as_its_twin(first_run, tmp_path):
    before = snapshot(first_run)
    code, _, err = train("--steps", 3, "--save", first_run, "--save-every", 1, "--seed", 1)  # run B, another seed
    assert code == 2 and err.count("\n") == 1
    assert "holds the checkpoints of another run (run " in err and "steps 3-6 (2 checkpoints)" in err  # run A named
    assert "this is a new run" in err and "Nothing was written" in err and "--overwrite" in err  # and run B
    assert snapshot(first_run) == before  # byte for byte: no file of run A changed, none was added
    # the next good step: run A resumed equals its uninterrupted twin, loss for loss and file for file
    code, resumed, err = train("--steps", 9, "--resume", first_run, "--save", first_run, "--save-every", 3)
    assert code == 0, err
    twin = tmp_path / "twin"
    code, whole, _ = train("--steps", 9, "--save", twin, "--save-every", 3)
    assert resumed["first_step"] == 7 and resumed["losses"] == whole["losses"][6:]
    assert snapshot(first_run) == snapshot(twin)


def test_the_python_api_refuses_the_same_way(first_run):
    before = snapshot(first_run)
    other = ZeroEngine(MLP([4, 8, 3]), Cluster(2), 2, Adam(lr=1e-2), "bf16-mixed")
    other.step(make_regression(np.random.default_rng(5), 2, 4, [4, 8, 3]))
    with pytest.raises(ValueError, match="holds the checkpoints of another run .* this is run [0-9a-f]+: MLP of 67 "
                                         "parameters, ZeRO-2 on 2 ranks, at step 1"):
        checkpoints.save(other, str(first_run))
    assert snapshot(first_run) == before
    with pytest.raises(ValueError, match="inside the checkpoint"):  # nor nested in a tag, nor inside the folder
        checkpoints.save(other, str(first_run / "step000003"))
    with pytest.raises(ValueError, match="inside the checkpoint"):
        checkpoints.save(other, str(first_run / "mine"))
    assert snapshot(first_run) == before


def test_overwrite_hands_the_folder_over_and_keeps_other_files(first_run):
    (first_run / "notes.txt").write_text("mine")
    code, out, err = train("--steps", 2, "--save", first_run, "--seed", 1, "--overwrite")
    assert code == 0, err
    assert sorted(p.name for p in first_run.iterdir()) == ["latest", "notes.txt", "step000002"]
    assert (first_run / "latest").read_text() == "step000002\n" and (first_run / "notes.txt").read_text() == "mine"
    code, resumed, err = train("--steps", 3, "--resume", first_run, "--save", first_run, "--seed", 1)
    assert code == 0 and resumed["first_step"] == 3, err  # the folder is run B's now: it resumes and saves on


def test_a_resumed_run_resharded_saves_on_into_its_folder(first_run):
    code, out, err = train("--steps", 7, "--resume", first_run, "--save", first_run, "--ranks", "3", "--stage", "3")
    assert code == 0, err
    manifests = [json.loads((first_run / t / "manifest.json").read_text()) for t in ("step000006", "step000007")]
    assert manifests[0]["run"] == manifests[1]["run"] and manifests[1]["world_size"] == 3


def test_a_run_saved_into_an_empty_folder_then_elsewhere_is_one_run(tmp_path):
    """The run id is a hash of the first save's bytes: the same command gives the same id in any process."""
    code, _, _ = train("--steps", 2, "--save", tmp_path / "a")
    code, _, _ = train("--steps", 2, "--save", tmp_path / "b")
    a, b = (json.loads((tmp_path / d / "step000002" / "manifest.json").read_text())["run"] for d in "ab")
    assert a == b and len(a["id"]) == 16


@pytest.mark.bad_input("checkpoint files", unchanged=True)
def test_a_hand_edited_run_id_is_named(first_run):
    path = first_run / "step000006" / "manifest.json"
    m = as_version_1(json.loads(path.read_text()))  # its own check (a version-2 edit fails its checksum first)
    m["run"]["id"] = "../etc"
    path.write_text(json.dumps(m))
    before = snapshot(first_run)
    with pytest.raises(checkpoints.CheckpointError, match=r"manifest.json: run.id must be a run id"):
        checkpoints.load(str(first_run), Cluster(2), MLP([4, 8, 3]))
    assert snapshot(first_run) == before
