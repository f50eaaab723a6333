"""Nothing a user does loses a checkpoint (issue 20, items 1-3 and 7).

- `consolidate` refuses any output inside the checkpoint, or a folder: no file of it changes.
- A save killed midway leaves a tag folder without a manifest: loading treats it as absent, the next
  save of that tag cleans it (stale temporary files too) and writes exactly what an uninterrupted
  run writes; a complete tag holding the same state is kept, one holding another state is refused.
- A hand-edited manifest is refused naming the file and the key, before anything is built.
- The same state gives the same bytes, in any process (safetensors' own writer orders its metadata at random).

Every refusal here also checks that no file of the checkpoint changed (`snapshot`).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import as_version_1

from zerosim import MLP, Adam, Cluster, ZeroEngine
from zerosim import checkpoint as checkpoints
from zerosim.checkpoint import CheckpointError, consolidate
from zerosim.cli.main import main
from zerosim.models import make_regression

WIDTHS, N = [4, 6, 3], 3


def snapshot(root) -> dict:
    """{relative path: bytes} of every file under `root` (what a refusal must leave exactly as it was)."""
    root = Path(root)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def batch(step: int):
    return make_regression(np.random.default_rng(100 + step), N, 3, WIDTHS)


def trained(steps: int) -> ZeroEngine:
    engine = ZeroEngine(MLP(WIDTHS), Cluster(N), 2, Adam(lr=1e-2), "bf16-mixed")
    for s in range(steps):
        engine.step(batch(s))
    return engine


@pytest.fixture()
def ckpt(tmp_path):
    """A folder of two complete checkpoints (steps 1 and 2), `latest` naming step 2."""
    directory = tmp_path / "ckpt"
    engine = trained(1)
    checkpoints.save(engine, str(directory))
    engine.step(batch(1))
    checkpoints.save(engine, str(directory))
    return directory


# ---------------------------------------------------------------- 1. consolidate never writes into a checkpoint

OUTSIDE_IS_FINE = "full.safetensors"
INSIDE = [  # (what the user typed after the checkpoint folder, how consolidate is pointed at the checkpoint)
    ("ckpt/latest", "ckpt"),  # the case: it overwrote `latest`, and the next --resume failed on its bytes
    ("ckpt/step000002/manifest.json", "ckpt"),
    ("ckpt/step000002/rank00001.safetensors", "ckpt"),
    ("ckpt/step000001/rank00000.safetensors", "ckpt"),  # another tag's file
    ("ckpt/full.safetensors", "ckpt"),  # a new file inside: not the checkpoint's to hold
    ("ckpt/latest", "ckpt/step000002"),  # the tag folder given: its parent's `latest` is still the checkpoint's
    ("ckpt/step000001/manifest.json", "ckpt/step000002"),
]


@pytest.mark.bad_input("checkpoint commands", unchanged=True)
@pytest.mark.parametrize("out, source", INSIDE)
def test_consolidate_refuses_an_output_inside_the_checkpoint(ckpt, out, source, capsys):
    root = ckpt.parent
    before = snapshot(ckpt)
    assert main(["checkpoint", "consolidate", str(root / source), str(root / out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "inside the checkpoint" in err and "outside it" in err, err
    with pytest.raises(ValueError, match="inside the checkpoint"):
        consolidate(str(root / source), str(root / out))  # the library refuses too, not only the command
    assert snapshot(ckpt) == before
    assert main(["train", "--resume", str(ckpt), "--steps", "3", "--stage", "2", "--ranks", "3", "--widths", "4,6,3",
                 "--json"]) == 0  # the checkpoint still resumes


@pytest.mark.bad_input("checkpoint commands", unchanged=True)
def test_consolidate_refuses_a_link_into_the_checkpoint_and_a_folder(ckpt, capsys):
    before = snapshot(ckpt)
    link = ckpt.parent / "link.safetensors"
    link.symlink_to(ckpt / "step000002" / "manifest.json")
    with pytest.raises(ValueError, match="a symbolic link"):
        consolidate(str(ckpt), str(link))
    with pytest.raises(ValueError, match="inside the checkpoint"):
        consolidate(str(ckpt), str(ckpt / "step000002" / "full.safetensors"))
    with pytest.raises(ValueError, match="a folder; give a file name in it"):
        consolidate(str(ckpt), str(ckpt.parent))
    with pytest.raises(ValueError, match="needs a path, got ''"):  # was: ": a folder; the consolidated ..." ('' is .)
        consolidate(str(ckpt), "")
    assert snapshot(ckpt) == before
    consolidate(str(ckpt), str(ckpt.parent / OUTSIDE_IS_FINE))  # outside: written
    assert (ckpt.parent / OUTSIDE_IS_FINE).stat().st_size > 0


@pytest.mark.bad_input("checkpoint files", unchanged=True)
@pytest.mark.parametrize("latest", [b"\xfe\xff\x00binary", b"../elsewhere\n", b""])
def test_a_damaged_latest_file_is_named(ckpt, latest):
    (ckpt / "latest").write_bytes(latest)
    before = snapshot(ckpt)
    with pytest.raises(CheckpointError, match=r"ckpt/latest: does not hold a checkpoint tag"):
        checkpoints.load(str(ckpt), Cluster(N), MLP(WIDTHS))
    assert snapshot(ckpt) == before


# ------------------------------------------------------- 2. incomplete tags are absent; a later save reuses them

def killed_midway(directory: Path, tag: str) -> None:
    """What a save of `tag` killed midway leaves: rank files, one of them half written under its temporary name,
    no manifest; and a temporary `latest` of an earlier kill."""
    folder = directory / tag
    folder.mkdir()
    (folder / "rank00000.safetensors").write_bytes(b"x" * 100)
    (folder / "rank00001.safetensors.tmp-4242").write_bytes(b"half")
    (directory / "latest.tmp-4243").write_text("step0000")


def test_an_incomplete_tag_is_absent_and_the_next_save_writes_it_as_an_uninterrupted_run_would(tmp_path):
    whole = tmp_path / "whole"
    engine = trained(1)
    checkpoints.save(engine, str(whole / "x"))  # an uninterrupted run's checkpoints, to compare bytes with
    engine.step(batch(1))
    checkpoints.save(engine, str(whole / "x"))
    directory = tmp_path / "ckpt"
    first = trained(1)
    checkpoints.save(first, str(directory))
    killed_midway(directory, "step000002")
    resumed = checkpoints.load(str(directory), Cluster(N), MLP(WIDTHS))  # step 1: step 2 never finished
    assert resumed.t == 1
    resumed.step(batch(1))
    checkpoints.save(resumed, str(directory))  # no "already exists": the incomplete folder is reused
    assert snapshot(directory / "step000002") == snapshot(whole / "x" / "step000002")  # bit for bit, nothing stale
    assert not list(directory.glob("*.tmp-*")) and (directory / "latest").read_text() == "step000002\n"


def test_latest_naming_an_incomplete_tag_or_missing_falls_back_to_the_newest_complete_one(ckpt):
    model = MLP(WIDTHS)
    killed_midway(ckpt, "step000003")
    (ckpt / "latest").write_text("step000003\n")  # never written by a save before its manifest; by hand, say
    assert checkpoints.load(str(ckpt), Cluster(N), model).t == 2
    (ckpt / "latest").unlink()  # a first save killed between its manifest and `latest`
    assert checkpoints.load(str(ckpt), Cluster(N), model).t == 2
    with pytest.raises(CheckpointError, match="no manifest"):
        checkpoints.load(str(ckpt), Cluster(N), model, tag="step000003")  # asked for by name: refused, not replaced


def test_a_complete_tag_latest_does_not_name_yet_is_kept_when_the_resumed_run_saves_the_same_state(ckpt):
    # killed after step 2's manifest, before `latest`: the run resumes at step 1 and saves step 2 again
    (ckpt / "latest").write_text("step000001\n")
    before = snapshot(ckpt / "step000002")
    resumed = checkpoints.load(str(ckpt), Cluster(N), MLP(WIDTHS))
    assert resumed.t == 1
    resumed.step(batch(1))
    checkpoints.save(resumed, str(ckpt))
    assert snapshot(ckpt / "step000002") == before and (ckpt / "latest").read_text() == "step000002\n"


@pytest.mark.bad_input("checkpoint files", unchanged=True)
def test_a_complete_tag_holding_another_state_is_refused_once(ckpt):
    before = snapshot(ckpt)
    other = trained(0)
    other.step(batch(7))  # iteration 1, another state: another run, refused as such (runs.py), naming both
    with pytest.raises(ValueError) as e:
        checkpoints.save(other, str(ckpt))
    assert str(e.value).count("holds the checkpoints of another run") == 1 and "rank0" not in str(e.value)
    assert snapshot(ckpt) == before
    resumed = checkpoints.load(str(ckpt), Cluster(N), MLP(WIDTHS), tag="step000001")  # the same run, other state
    resumed.step(batch(7))
    with pytest.raises(ValueError) as e:
        checkpoints.save(resumed, str(ckpt))
    assert str(e.value).count("already holds another checkpoint") == 1 and "rank0" not in str(e.value)
    assert snapshot(ckpt) == before


# ---------------------------------------------------------------- 3. hand-edited manifests: the file and the key named

def edit(key_path: str, value):
    def apply(m):
        node = m
        *parents, last = key_path.split(".")
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if value is DELETE:
            del node[last]
        else:
            node[int(last) if isinstance(node, list) else last] = value
    return apply


DELETE = object()
EDITS = [  # (edit, the words the error must hold); the checkpoint: N = 3, stage 2, t = iteration = 2
    (edit("optimizer.step", -5), "optimizer.step must be an integer >= 0, got -5"),
    (edit("optimizer.step", 1000), "iteration is 2, below optimizer.step 1000"),
    (edit("iteration", -1), "iteration must be an integer >= 0, got -1"),
    (edit("optimizer.step", 2.5), "optimizer.step must be an integer, got 2.5"),
    (edit("stochastic_rounding.next_step", 9),
     r"stochastic_rounding.next_step is 9; it must be optimizer.step \+ 1 = 3"),
    (edit("stage", DELETE), "stage is missing"),
    (edit("files", DELETE), "files is missing"),
    (edit("optimizer", DELETE), "optimizer.name is missing"),
    (edit("layout", DELETE), "layout.num_params is missing"),
    (edit("world_size", 6), r"layout.shard_size is 17, but 51 parameters at ZeRO stage 2 on world_size 6 give 9"),
    (edit("world_size", 0), "world_size must be an integer >= 1, got 0"),
    # N = 3 divides P = 51: stage 3's regions are stage 2's, so the edit shows in the files: stage 3 shards the params
    (edit("stage", 3),
     r"stage is 3, but rank00000.safetensors holds 'params' of shape \(51,\); stage 3 on 3 ranks keeps \(17,\)"),
    (edit("stage", 0), r"layout.regions is \[\[0, 17\], .*world_size 3 give \[\[0, 51\]"),
    (edit("stage", 7), r"stage must be 0, 1, 2 or 3, got 7"),
    (edit("files.1.rank", 2), r"files\[1\].rank is 2; the files are listed in rank order"),
    (edit("files.2.file", "../../etc.safetensors"), r"files\[2\].file must be 'rank00002.safetensors'"),
    (edit("model.num_params", 52), "model.num_params is 52, but the parameters' shapes hold 51"),
    (edit("optimizer.name", "adamax"), "optimizer.name names no optimizer zerosim has"),
    (edit("optimizer.hyperparameters.lr", "fast"), "optimizer.hyperparameters do not make a adam optimizer"),
    (edit("precision.compute", "fp13"), "precision does not describe a policy zerosim can run"),
    (edit("precision.master", None), "precision says master None, but the rank files hold a master copy"),
    (edit("loss_scaler.kind", "torch"), "its loss scaler is 'torch', but its precision policy names 'static'"),
]


@pytest.mark.bad_input("checkpoint files", unchanged=True)
@pytest.mark.parametrize("change, words", EDITS)
def test_a_hand_edited_manifest_is_refused_naming_the_file_and_the_key(ckpt, change, words):
    # as a version-1 manifest (no checksums): what each key's own check says
    path = ckpt / "step000002" / "manifest.json"
    manifest = as_version_1(json.loads(path.read_text()))
    change(manifest)
    path.write_text(json.dumps(manifest))
    before = snapshot(ckpt)
    cluster = Cluster(N)
    with pytest.raises(CheckpointError, match=f"step000002/manifest.json: .*{words}"):
        checkpoints.load(str(ckpt), cluster, MLP(WIDTHS))
    assert all(r.ledger.current() == 0 and not r.ledger.live for r in cluster.ranks)  # nothing was built
    assert snapshot(ckpt) == before


@pytest.mark.bad_input("checkpoint files", unchanged=True)
@pytest.mark.parametrize("change, words", EDITS)
def test_a_hand_edited_manifest_fails_its_checksum_naming_the_key(ckpt, change, words):
    # the same edits of a version-2 manifest: refused by its checksums, naming the first key that changed
    path = ckpt / "step000002" / "manifest.json"
    manifest = json.loads(path.read_text())
    before_edit = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))
    changed = sorted(set(_leaves(manifest).items()) ^ set(_leaves(before_edit).items()))  # the keys the edit touched
    before = snapshot(ckpt)
    cluster = Cluster(N)
    with pytest.raises(CheckpointError, match="step000002/manifest.json: (.+) is not what the save wrote") as e:
        checkpoints.load(str(ckpt), cluster, MLP(WIDTHS))
    named = str(e.value).split(": ")[1].split(" ")[0]
    assert named in {k for k, _ in changed}, (named, changed)
    assert all(r.ledger.current() == 0 and not r.ledger.live for r in cluster.ranks)  # nothing was built
    assert snapshot(ckpt) == before


def _leaves(value, prefix=""):
    """{dotted key: its JSON} of a manifest's values, dicts walked (as its checksums are made, written here again)."""
    out = {}
    for key, v in value.items():
        if key == "checksums":
            continue
        if isinstance(v, dict) and v:
            out.update(_leaves(v, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(v, sort_keys=True)
    return out


# ---------------------------------------------------------------- 7. the same state, the same bytes

SAVE_IN_A_FRESH_PROCESS = """
import sys, numpy as np
from zerosim import MLP, Adam, Cluster, ZeroEngine, checkpoint
from zerosim.models import make_regression
engine = ZeroEngine(MLP([4, 6, 3]), Cluster(3), 2, Adam(lr=1e-2), "bf16-mixed")
engine.step(make_regression(np.random.default_rng(100), 3, 3, [4, 6, 3]))
checkpoint.save(engine, sys.argv[1])
"""


@pytest.mark.slow
def test_the_same_state_gives_the_same_bytes_in_any_process(tmp_path):
    # Each process hashes strings with its own seed: safetensors' writer then ordered its metadata differently.
    for seed, name in (("1", "a"), ("2", "b"), ("3", "c")):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        subprocess.run([sys.executable, "-c", SAVE_IN_A_FRESH_PROCESS, str(tmp_path / name)], env=env, check=True)
    assert snapshot(tmp_path / "a") == snapshot(tmp_path / "b") == snapshot(tmp_path / "c")


def test_zerosim_writes_what_safetensors_writes_and_reads_back():
    # The format's own library is the yardstick: without metadata its writer is deterministic, and the bytes match.
    from safetensors.numpy import load, save

    from zerosim.checkpoint._files import serialize

    rng = np.random.default_rng(0)
    tensors = {"params": rng.integers(0, 2**16, 7).astype(np.uint16),
               "master": rng.standard_normal(5).astype(np.float32),
               "optim.m": rng.standard_normal((2, 3)), "h": rng.standard_normal(3).astype(np.float16),
               "b": rng.integers(0, 255, 9).astype(np.uint8), "empty": np.zeros(0, np.float32)}
    assert serialize(tensors) == save(tensors)
    back = load(bytes(serialize(tensors, metadata={"z": "1", "a": "2", "rank": "0"})))
    assert all(np.array_equal(back[k], v) and back[k].dtype == v.dtype for k, v in tensors.items())
