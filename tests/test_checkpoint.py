"""Sharded checkpoints: a resumed run is the same run, resharding changes no bit, bad checkpoints are refused.

Letters: N ranks saving, M ranks loading, P parameters. Equality is on bit patterns throughout.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import HANG_TIMEOUT, bits  # the tests' shared helpers (tests/helpers.py)
from hypothesis import given
from hypothesis import strategies as st

from zerosim import MLP, Adam, Cluster, Reference, ZeroEngine, get_optimizer
from zerosim import checkpoint as ckpt
from zerosim.checkpoint import CheckpointError, consolidated, read_state
from zerosim.models import make_regression

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPTIMIZERS = {"adam": dict(lr=1e-2), "adamw": dict(lr=1e-2, weight_decay=0.1), "sgd": dict(lr=1e-2, momentum=0.9),
              "lion": dict(lr=1e-3), "adan": dict(lr=1e-2)}


def same_state(a: ZeroEngine, b: ZeroEngine) -> bool:
    return (
        np.array_equal(bits(a.full_master()), bits(b.full_master()))
        and all(np.array_equal(bits(x), bits(b.full_optimizer_state()[k])) for k, x in a.full_optimizer_state().items())
        and np.array_equal(bits(a.full_params()), bits(b.full_params()))
        and a.t == b.t
    )


def batches(widths, n, steps, seed):
    data = make_regression(np.random.default_rng(seed), n * steps, 3, widths)
    return [data[s * n : (s + 1) * n] for s in range(steps)]


# ---------------------------------------------------------------- resume is the same run

@pytest.mark.slow
@given(
    widths=st.lists(st.integers(1, 6), min_size=2, max_size=3),
    n=st.integers(1, 4),
    stage=st.integers(0, 3),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed", "bf16-pure-sr"]),
    opt=st.sampled_from(sorted(OPTIMIZERS)),
    before=st.integers(1, 3),
    after=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_resume_is_the_same_run(tmp_path_factory, widths, n, stage, precision, opt, before, after, seed):
    model = MLP(widths)
    params = model.init_params(np.random.default_rng(seed))
    steps = batches(widths, n, before + after, seed + 1)
    whole = ZeroEngine(model, Cluster(n), stage, get_optimizer(opt, **OPTIMIZERS[opt]), precision, params=params)
    first = ZeroEngine(model, Cluster(n), stage, get_optimizer(opt, **OPTIMIZERS[opt]), precision, params=params)
    for b in steps[:before]:
        assert whole.step(b) == first.step(b)
    folder = tmp_path_factory.mktemp("ckpt")
    ckpt.save(first, str(folder))
    resumed = ckpt.load(str(folder), Cluster(n), model)  # optimizer and precision from the manifest
    assert same_state(resumed, first)
    for b in steps[before:]:
        assert resumed.step(b) == whole.step(b)
    assert same_state(resumed, whole)


def test_resume_in_a_fresh_process(tmp_path):
    # Save after 2 steps here; a new Python process loads the checkpoint, takes 2 more steps and writes its
    # state; it must equal this process's uninterrupted 4 steps, bit for bit.
    widths, n = [4, 7, 3], 3
    model = MLP(widths)
    steps = batches(widths, n, 4, 5)
    whole = ZeroEngine(model, Cluster(n), 3, Adam(lr=1e-2), "fp16-mixed")
    for b in steps[:2]:
        whole.step(b)
    ckpt.save(whole, str(tmp_path / "ckpt"))
    for b in steps[2:]:
        whole.step(b)
    script = f"""
import numpy as np
from zerosim import MLP, Cluster
from zerosim import checkpoint as ckpt
from zerosim.models import make_regression
data = make_regression(np.random.default_rng(5), {n} * 4, 3, {widths})  # the same micro-batches as batches(..., 5)
engine = ckpt.load({str(tmp_path / 'ckpt')!r}, Cluster({n}), MLP({widths}))
for s in (2, 3):
    engine.step(data[s * {n} : (s + 1) * {n}])
np.save({str(tmp_path / 'master.npy')!r}, engine.full_master())
np.save({str(tmp_path / 'params.npy')!r}, engine.full_params().view(np.uint16))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=HANG_TIMEOUT)  # only a hang reaches it
    assert result.returncode == 0, result.stderr
    assert np.array_equal(bits(np.load(tmp_path / "master.npy")), bits(whole.full_master()))
    assert np.array_equal(np.load(tmp_path / "params.npy"), bits(whole.full_params()))


# ---------------------------------------------------------------- resharding N -> M, stage s -> s'

@pytest.mark.slow
@given(
    widths=st.lists(st.integers(1, 6), min_size=2, max_size=3),
    n=st.integers(1, 5),
    m=st.integers(1, 5),
    stage=st.integers(0, 3),
    new_stage=st.integers(0, 3),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed"]),
    seed=st.integers(0, 2**16),
)
def test_reshard_gives_the_consolidated_state_and_continues_like_the_oracle(
    tmp_path_factory, widths, n, m, stage, new_stage, precision, seed
):
    model = MLP(widths)
    saved = ZeroEngine(
        model, Cluster(n), stage, Adam(lr=1e-2), precision, params=model.init_params(np.random.default_rng(seed))
    )
    for b in batches(widths, n, 2, seed + 1):
        saved.step(b)
    folder = str(tmp_path_factory.mktemp("ckpt"))
    ckpt.save(saved, folder)
    loaded = ckpt.load(folder, Cluster(m), model, stage=new_stage)
    whole = consolidated(folder)  # the zero_to_fp32 route: one unsharded file's contents
    state = read_state(folder)
    master = np.concatenate([whole[f"{model.layers[s.layer].name}.{s.name}"].reshape(-1) for s in model.specs])
    assert np.array_equal(bits(loaded.full_master()), bits(master))
    for k in ("m", "v"):
        want = np.concatenate(
            [whole[f"{model.layers[s.layer].name}.{s.name}.optim.{k}"].reshape(-1) for s in model.specs]
        )
        assert np.array_equal(bits(loaded.full_optimizer_state()[k]), bits(want))
    assert np.array_equal(bits(loaded.full_params()), bits(state.params)) and loaded.t == 2
    # continuing on M ranks equals the oracle on M ranks started from the same state
    ref = Reference(model, Adam(lr=1e-2), precision, world_size=m)
    ref.set_state(state.params, state.master, state.optimizer, state.t)
    for b in batches(widths, m, 2, seed + 2):
        assert loaded.step(b) == ref.step(b)
    assert np.array_equal(bits(loaded.full_master()), bits(ref.master()))
    assert np.array_equal(bits(loaded.full_params()), bits(ref.compute_params()))


def test_consolidated_stage3_with_padding_is_the_oracles_master(tmp_path):
    # 3*5+5 + 5*2+2 = 32 parameters on N = 3: s = 11, one padding element; layers straddle shards.
    widths, n = [3, 5, 2], 3
    model = MLP(widths)
    assert model.num_params % n != 0
    engine = ZeroEngine(model, Cluster(n), 3, Adam(lr=1e-2), "bf16-mixed")
    ref = Reference(model, Adam(lr=1e-2), "bf16-mixed", world_size=n)
    for b in batches(widths, n, 3, 0):
        engine.step(b)
        ref.step(b)
    ckpt.save(engine, str(tmp_path))
    whole = consolidated(str(tmp_path))
    flat = np.concatenate([whole[f"{model.layers[s.layer].name}.{s.name}"].reshape(-1) for s in model.specs])
    assert flat.shape == (32,) and np.array_equal(bits(flat), bits(ref.master()))


# ---------------------------------------------------------------- bad checkpoints, refused before anything loads

@pytest.fixture()
def checkpoint(tmp_path):
    model = MLP([4, 6, 3])
    engine = ZeroEngine(model, Cluster(3), 2, Adam(lr=1e-2), "bf16-mixed")
    engine.step(batches([4, 6, 3], 3, 1, 0)[0])
    folder = ckpt.save(engine, str(tmp_path / "ckpt"))
    return str(tmp_path / "ckpt"), folder, model


def refused(directory, model, match, **options):
    cluster = Cluster(2)
    with pytest.raises(CheckpointError, match=match):
        ckpt.load(directory, cluster, model, **options)
    assert all(r.ledger.current() == 0 and not r.ledger.live for r in cluster.ranks)  # nothing was built


@pytest.mark.bad_input("checkpoint files", unchanged=True)
def test_a_missing_rank_file_is_named(checkpoint):
    directory, folder, model = checkpoint
    os.remove(os.path.join(folder, "rank00001.safetensors"))
    refused(directory, model, r"rank00001\.safetensors: missing \(rank 1 of 3's file\)")


@pytest.mark.bad_input("checkpoint files", unchanged=True)
def test_a_truncated_file_is_named(checkpoint):
    directory, folder, model = checkpoint
    path = os.path.join(folder, "rank00002.safetensors")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 7)
    refused(directory, model, r"rank00002\.safetensors: \d+ bytes, the manifest says \d+: truncated")


@pytest.mark.bad_input("checkpoint files", unchanged=True)
def test_a_corrupted_file_fails_its_checksum(checkpoint):
    directory, folder, model = checkpoint
    path = os.path.join(folder, "rank00000.safetensors")
    data = bytearray(Path(path).read_bytes())
    data[-3] ^= 0x01  # one bit of one weight, same size
    Path(path).write_bytes(bytes(data))
    refused(directory, model, r"rank00000\.safetensors: its xxh3_64 checksum differs from the manifest's")


@pytest.mark.bad_input("checkpoint files", unchanged=True)
@pytest.mark.parametrize("edit, match", [
    (lambda m: m.update(version=99), "checkpoint format version 99; this zerosim reads versions 1 and 2"),
    (lambda m: m.update(format="something-else"), "not a zerosim checkpoint manifest"),
])
def test_a_manifest_of_another_format_is_refused(checkpoint, edit, match):
    directory, folder, model = checkpoint
    path = os.path.join(folder, "manifest.json")
    manifest = json.loads(Path(path).read_text())
    edit(manifest)
    Path(path).write_text(json.dumps(manifest))
    refused(directory, model, match)


@pytest.mark.bad_input("checkpoint files", unchanged=True)
@pytest.mark.parametrize("other, match", [
    (MLP([4, 6, 2]), r"saved from another model: its parameter count 51, this model's 44"),
    (MLP([4, 6, 3], activation="gelu"), r"its layers \(names, windows and kinds\) \['act0', 30, 30, 'ReLU'\], "
                                        r"this model's \['act0', 30, 30, 'GELU'\]"),
])
def test_a_checkpoint_of_another_model_is_refused(checkpoint, other, match):
    directory, _, model = checkpoint
    refused(directory, other, match)


@pytest.mark.bad_input("checkpoint files", unchanged=True)
@pytest.mark.parametrize("options, match", [
    (dict(expect_stage=3), "saved at ZeRO stage 2, not the stage 3 expected"),
    (dict(precision="fp16-mixed"), "saved with precision"),
    (dict(optimizer=get_optimizer("lion")), "its optimizer state is adam's; it cannot resume lion"),
])
def test_a_checkpoint_the_caller_did_not_expect_is_refused(checkpoint, options, match):
    directory, _, model = checkpoint
    refused(directory, model, match, **options)


@pytest.mark.bad_input("checkpoint files", unchanged=True)
def test_an_existing_tag_is_not_overwritten(checkpoint):
    directory, folder, model = checkpoint
    before = {f: Path(folder, f).read_bytes() for f in os.listdir(folder)}
    engine = ckpt.load(directory, Cluster(3), model)
    assert ckpt.save(engine, directory) == folder  # the same state under the same tag: nothing to write
    engine.step(batches([4, 6, 3], 3, 1, 5)[0])
    with pytest.raises(ValueError, match="step000001 already holds another checkpoint .iteration 1.; nothing was") as e:
        ckpt.save(engine, directory, tag="step000001")  # another state under that tag
    assert str(e.value).count("already holds") == 1  # said once, not once per rank
    assert {f: Path(folder, f).read_bytes() for f in os.listdir(folder)} == before


def test_an_interrupted_save_leaves_the_previous_checkpoint_intact(tmp_path):
    # A process saves step 1, then dies (SIGKILL) while writing step 2's second rank file: `latest` still
    # names step 1, which loads as it was; the half-written step 2 has no manifest and is refused.
    script = os.path.join(ROOT, "tests", "checkpoint_killed_save.py")
    result = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True,
                            timeout=HANG_TIMEOUT)  # only a hang reaches it
    assert result.returncode == -9, result.stderr  # killed, as planned
    assert (tmp_path / "latest").read_text().strip() == "step000001"
    assert os.path.exists(tmp_path / "step000002" / "rank00000.safetensors")
    assert not os.path.exists(tmp_path / "step000002" / "manifest.json")
    model = MLP([4, 6, 3])
    engine = ckpt.load(str(tmp_path), Cluster(2), model)
    want = np.load(tmp_path / "step1_master.npy")
    assert engine.t == 1 and np.array_equal(bits(engine.full_master()), bits(want))
    with pytest.raises(CheckpointError, match="no manifest"):
        ckpt.load(str(tmp_path), Cluster(2), model, tag="step000002")


# ---------------------------------------------------------------- the command line

def test_train_save_and_resume_is_the_same_run(tmp_path):
    import io
    from contextlib import redirect_stdout

    from zerosim.cli.main import main

    def run(*argv):
        out = io.StringIO()
        with redirect_stdout(out):
            assert main(["train", "--json", "--steps", "6", "--stage", "3", "--seed", "4", *argv]) == 0
        return json.loads(out.getvalue())

    whole = run()
    first = run("--save", str(tmp_path), "--save-every", "3")
    assert sorted(os.listdir(tmp_path)) == ["latest", "step000003", "step000006"]
    shutil.rmtree(tmp_path / "step000006")
    (tmp_path / "latest").write_text("step000003\n")
    resumed = run("--resume", str(tmp_path))
    assert first["losses"] == whole["losses"] and resumed["first_step"] == 4
    assert resumed["losses"] == whole["losses"][3:]


def test_checkpoint_inspect_and_consolidate_commands(checkpoint, tmp_path, capsys):
    from zerosim.cli.main import main

    directory, _, model = checkpoint
    assert main(["checkpoint", "inspect", directory]) == 0
    out = capsys.readouterr().out
    # P = 4*6+6 + 6*3+3 = 51 on 3 ranks: s = 17, no padding; fc1.w straddles ranks 1 and 2
    assert "3 ranks, 51 parameters" in out and "owns [17, 34): 17 real; fc0.b[6:6]" not in out
    assert "padded length 51 (no padding: the shards split the parameters evenly)" in out
    assert "fc1.w[0:4]" in out and "fc1.w[4:18]" in out
    assert main(["checkpoint", "consolidate", directory, str(tmp_path / "full.safetensors")]) == 0
    from safetensors.numpy import load_file

    full = load_file(str(tmp_path / "full.safetensors"))
    assert full["fc0.w"].shape == (6, 4) and full["fc1.b.optim.v"].shape == (3,) and full["fc0.w"].dtype == np.float32


def test_inspect_counts_the_padding_in_words(tmp_path, capsys):
    from zerosim.cli.main import main

    # the default MLP [16, 64, 64, 4]: 16*64+64 + 64*64+64 + 64*4+4 = 5,508 parameters; on 5 ranks s = ceil(5508/5) =
    # 1,102, padded to 5 * 1,102 = 5,510: two elements of padding, after the last parameter
    assert main(["train", "--steps", "1", "--ranks", "5", "--save", str(tmp_path / "five")]) == 0
    assert main(["checkpoint", "inspect", str(tmp_path / "five")]) == 0
    out = capsys.readouterr().out
    assert "shard size s = 1,102, padded length 5,510 (2 padding elements at the end, [5,508, 5,510))" in out
    assert "owns [4,408, 5,510): 1,100 real + 2 padding" in out  # rank 4: 5,508 - 4 * 1,102 = 1,100 real


def test_rank_files_are_plain_safetensors(checkpoint):
    # What zerosim writes, safetensors' own reader reads: the same bit patterns (bf16 stored as uint16).
    from safetensors.numpy import load_file

    directory, folder, _ = checkpoint
    state = read_state(directory)
    theirs = load_file(os.path.join(folder, "rank00001.safetensors"))
    assert theirs["params"].dtype == np.uint16 and np.array_equal(theirs["params"], bits(state.files[1]["params"]))
    assert np.array_equal(theirs["optim.v"], state.files[1]["optim.v"])
