"""Issue 35, items 2 and 8: every command that writes a file checks where before any work (zerosim/outputs.py), never
writes into a checkpoint folder, never names a temporary file in an error, and refuses up front the sizes that would
make its work explode, saying what they would cost.

On main: `assignment grade --results CK/latest` overwrote `latest` with results.json; `explore --html CK` wrote
index.html into the checkpoint; `explore --html /proc/x` failed after the whole grid (80 s), `plan --figure` after
the planning (34 s); a config of 10^6 layers or `--accumulation-steps 100000` printed nothing for minutes.

"Before any work" is checked by replacing the work with a function that fails the test if it is called."""

import errno
import json
from pathlib import Path

import pytest
from helpers import files_of as snapshot  # what a refused command must leave as it was, links included
from helpers import run_cli as run  # (exit status, stdout, stderr) of `zerosim *argv`, in this process

from zerosim.models.hf import shipped_config
from zerosim.outputs import checkpoint_around, write_atomic

PROC = "/proc/zerosim-cannot-write-here"  # /proc takes no new files, for root neither: permissions alone do not tell


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    """A run's checkpoint folder: steps 1 and 2, `latest` naming step 2."""
    folder = tmp_path_factory.mktemp("outputs") / "CK"
    assert run("train", "--widths", "4,6,3", "--ranks", "2", "--steps", "2", "--save", folder, "--save-every", "1",
               "--json")[0] == 0
    return folder


@pytest.fixture()
def no_work(monkeypatch):
    """Each command's long work, replaced by a failure: a refusal must come before it."""
    def ran(*args, **kwargs):
        raise AssertionError("the work ran before the output path was checked")

    import zerosim.analysis.planner
    import zerosim.explore._page
    import zerosim.teaching.assignments

    monkeypatch.setattr(zerosim.explore._page, "page_data", ran)
    monkeypatch.setattr(zerosim.analysis.planner, "plan", ran)
    monkeypatch.setattr(zerosim.analysis.planner, "meta_step", ran)
    monkeypatch.setattr(zerosim.teaching.assignments, "grade", ran)


def starter(tmp_path) -> Path:
    path = tmp_path / "a1_ring.py"
    assert run("assignment", "starter", "1")[0] == 0
    path.write_text("def ring_reduce_scatter(*a):\n    raise NotImplementedError\n")
    return path


PLAN = ["plan", "--model", "gpt2-small", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "128", "--global-batch",
        "16"]
TIMELINE = ["timeline", "--model", "gpt2-small", "--ranks", "8"]


def commands(where, tmp_path):
    """(argv, the flag named) of every command that writes a file, writing at `where(name)`."""
    return [
        (["assignment", "grade", "1", "--file", starter(tmp_path), "--results", where("results.json")], "--results"),
        (["explore", "--html", where("site")], "--html"),
        (["figures", "--out", where("figs"), "--only", "ring_steps"], "--out"),
        ([*TIMELINE, "--trace", where("t.json")], "--trace"),
        ([*TIMELINE, "--figure", where("t.png")], "--figure"),
        ([*PLAN, "--figure", where("plan.png")], "--figure"),
        (["train", "--widths", "4,6,3", "--ranks", "2", "--steps", "1", "--save", where("run")], ""),
    ]


@pytest.mark.bad_input("checkpoint commands", unchanged=True)
@pytest.mark.parametrize("i", range(7))
@pytest.mark.parametrize("inside", ["latest", "step000002", "step000001/x", ""])
def test_no_command_writes_inside_a_checkpoint(ck, i, inside, tmp_path, no_work):
    before = snapshot(ck)

    def where(name):
        return ck / inside if inside == "latest" else ck / inside / name

    argv, flag = commands(where, tmp_path)[i]
    code, out, err = run(*argv)
    assert code == 2 and err.count("\n") == 1 and "inside the checkpoint" in err and flag in err, err
    assert snapshot(ck) == before  # byte for byte


@pytest.mark.bad_input("checkpoint commands", unchanged=True)
@pytest.mark.parametrize("i", range(7))
def test_a_place_that_cannot_be_written_is_refused_before_the_work(i, tmp_path, no_work):
    argv, flag = commands(lambda name: f"{PROC}/{name}", tmp_path)[i]
    code, out, err = run(*argv)
    assert code == 2 and err.count("\n") == 1 and "cannot write in /proc" in err, err
    assert ".tmp" not in err


@pytest.mark.bad_input("checkpoint commands", unchanged=True)
def test_consolidate_refuses_another_checkpoint_and_a_folder_it_cannot_write(ck, tmp_path):
    other = tmp_path / "other"
    assert run("train", "--widths", "4,6,3", "--ranks", "2", "--steps", "1", "--save", other, "--json")[0] == 0
    before = snapshot(ck)
    for out in (ck / "x.safetensors", ck / "step000001" / "x.safetensors", f"{PROC}/x.safetensors"):
        code, _, err = run("checkpoint", "consolidate", other, out)
        assert code == 2 and err.count("\n") == 1 and ("inside the checkpoint" in err or "cannot write" in err), err
    assert snapshot(ck) == before


def test_a_write_that_fails_names_the_file_not_its_temporary_twin(tmp_path):
    target = tmp_path / "out.png"

    def disk_full(tmp):
        open(tmp, "wb").write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device", tmp)

    with pytest.raises(OSError) as e:
        write_atomic(str(target), disk_full, "--figure")
    assert str(target) in str(e.value) and ".tmp" not in str(e.value) and "No space left" in str(e.value)
    assert list(tmp_path.iterdir()) == []  # no temporary file left either
    from zerosim.checkpoint._files import write_atomic as checkpoint_write

    with pytest.raises(OSError) as e:
        checkpoint_write(str(target), disk_full)
    assert ".tmp" not in str(e.value) and list(tmp_path.iterdir()) == []


def test_what_counts_as_a_checkpoint_folder(ck, tmp_path):
    assert checkpoint_around(str(ck / "latest")) == str(ck)
    assert checkpoint_around(str(ck / "step000001" / "a" / "b")) == str(ck / "step000001")
    assert checkpoint_around(str(tmp_path / "elsewhere.png")) is None
    assert checkpoint_around(str(ck), include_self=False) is None  # a save's own folder may be a run's


# -------------------------------------------------------------- sizes that make the work explode, refused at once

def config_with(tmp_path, layers) -> Path:
    config = json.loads(shipped_config("llama-3-8b").read_text())
    config["num_hidden_layers"] = layers
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.bad_input("planner")
@pytest.mark.parametrize("argv, words", [
    ([*TIMELINE, "--accumulation-steps", "100000"], "1,500,000 unit passes, more than the 200,000"),
    (["train", "--accumulation-steps", "100000", "--steps", "1"], "one step would run 400,000 micro-batches"),
    (["memory", "--params", "7e9", "--layers", "1000000", "--ranks", "8"], "has 1,000,000 units"),
    (["memory", "--config", "DEEP", "--ranks", "8"], "(1,000,000 layers) has 1,000,003 units"),
    (["timeline", "--config", "DEEP", "--ranks", "8"], "(1,000,000 layers) has 1,000,003 units"),
    (["plan", "--config", "DEEP", *PLAN[3:]], "(1,000,000 layers) has 1,000,003 units"),
    (["timeline", "--model", "gpt2-small", "--sweep", "--sweep-ranks", ",".join(str(2**k) for k in range(21))],
     "zerosim sweeps at most 1,048,576"),
    # Ψ // 1,000 = 124,439 all-gathers a step (was: run, ~18 s here, minutes before the refresh joined its handles
    # in one go); the least size that passes is ceil(124,439,808 / 100,000) = 1,245
    ([*TIMELINE, "--stage", "2", "--allgather-bucket-size", "1000"], "into 124,439 all-gathers a step (Ψ / size), "
     "more than the 100,000 zerosim runs in one command (each a call on every rank): give at least 1,245 elements"),
    (["memory", "--model", "gpt2-small", "--ranks", "8", "--allgather-bucket-size", "1000"], "124,439 all-gathers"),
    # the stages' sweep: 12,443 all-gathers × 3 stages × 3 N = 111,987 over 9 meta steps
    (["timeline", "--model", "gpt2-small", "--sweep", "--sweep-ranks", "8,16,32", "--allgather-bucket-size", "10000"],
     "into 111,987 all-gathers over 9 meta steps"),
])
def test_sizes_that_explode_are_refused_at_once_with_their_cost(argv, words, tmp_path, no_work):
    argv = [str(config_with(tmp_path, 10**6)) if a == "DEEP" else a for a in argv]
    code, out, err = run(*argv)
    assert code == 2 and words in err and err.count("\n") == 1, err


def test_the_planner_lists_a_billion_sequences_divisors_without_a_billion_tries():
    from zerosim.analysis.planner import divisors

    assert all(divisors(n) == tuple(d for d in range(1, n + 1) if n % d == 0) for n in range(1, 600))
    assert len(divisors(10**9)) == 100 and divisors(10**9)[-1] == 10**9
