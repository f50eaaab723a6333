"""Issue 56, item 1: every file a command writes goes through the one output check (zerosim/outputs.py), the trace log
and the Chrome trace included: never inside a checkpoint (another run's or the one it resumes or saves), never through
a symbolic link, checked before any work (before a resume reads its checkpoint), and a folder, /proc or a read-only
file is refused in one line naming the flag and the path.

On main: `train --trace-log B/step000006/rank00000.safetensors` overwrote that rank file (rc 0), and with
`--resume B --save B` truncated the checkpoint it was about to resume; a folder, /proc/x.log or a read-only file gave
a bare `[Errno N]`; `write_chrome_trace` into a folder named its temporary file.
"""

import os
from pathlib import Path

import pytest
from helpers import files_of, run_cli

import zerosim.checkpoint
from zerosim import Cluster
from zerosim.train import TrainConfig

TRAIN = ("train", "--widths", "4,6,3", "--ranks", "2", "--steps", "3", "--print-every", "100")
PROC = "/proc/zerosim-cannot-write-here.log"  # /proc takes no new file, for root neither


@pytest.fixture(scope="module")
def run_b(tmp_path_factory):
    """Another run's checkpoints: steps 1 and 2, `latest` naming step 2."""
    folder = tmp_path_factory.mktemp("runs") / "B"
    assert run_cli(*TRAIN[:-4], "--steps", "2", "--save", folder, "--save-every", "1", "--json")[0] == 0
    return folder


@pytest.mark.bad_input("command line", unchanged=True)
@pytest.mark.parametrize("inside", ["step000002/rank00000.safetensors", "step000002/rank00001.safetensors", "latest",
                                    "step000002/manifest.json", "trace.log", "step000001/new.log"])
def test_the_trace_log_never_writes_into_another_runs_checkpoint(run_b, tmp_path, monkeypatch, inside):
    monkeypatch.chdir(tmp_path)
    before = files_of(run_b)
    code, out, err = run_cli(*TRAIN, "--trace-log", run_b / inside)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"error: --trace-log {run_b / inside}: inside the checkpoint" in err
    assert files_of(run_b) == before


@pytest.mark.bad_input("checkpoint commands", unchanged=True)
def test_the_trace_log_into_the_checkpoint_a_run_resumes_is_refused_before_it_reads_it(tmp_path, monkeypatch):
    # was: the rank file truncated when the log opened, before the resume read it: the run destroyed its own input
    folder = tmp_path / "B"
    assert run_cli(*TRAIN, "--save", folder, "--save-every", "1")[0] == 0
    before = files_of(folder)

    def read(*args, **kwargs):
        raise AssertionError("the resume read its checkpoint before --trace-log was checked")

    for name in ("saved_settings", "saved_data", "saved_optimizer", "load"):
        monkeypatch.setattr(zerosim.checkpoint, name, read, raising=False)
    code, _, err = run_cli(*TRAIN[:-4], "--steps", "5", "--resume", folder, "--save", folder, "--trace-log",
                       folder / "step000003" / "rank00001.safetensors")
    assert code == 2 and "--trace-log" in err and "inside the checkpoint" in err
    assert files_of(folder) == before


@pytest.mark.bad_input("command line", unchanged=True)
def test_the_trace_log_inside_the_folder_the_run_saves_into_is_refused(tmp_path):
    # the folder does not exist yet: the run's first save would make it a checkpoint with the log inside
    code, _, err = run_cli(*TRAIN, "--save", tmp_path / "N", "--trace-log", tmp_path / "N" / "t.log")
    assert code == 2 and f"--trace-log {tmp_path / 'N' / 't.log'}: inside --save {tmp_path / 'N'}" in err
    assert not (tmp_path / "N").exists()


@pytest.mark.bad_input("command line", unchanged=True)
@pytest.mark.parametrize("argv, words", [
    (("--steps", "3", "--save", "{B}"), "holds the checkpoints of another run"),
    (("--steps", "2", "--resume", "{B}"), "is at step 2; --steps 2 asks for no more"),
], ids=["another run's --save", "a resume at its last step"])
def test_a_run_refused_after_its_ranks_exist_leaves_the_last_log_as_it_was(run_b, tmp_path, argv, words):
    # the trace's log file was made (an earlier log emptied) as the Cluster was built, before these two refusals: a
    # refused run left an empty log where the last run's had been (a random walk over train's output flags found it)
    log = tmp_path / "trace.log"
    log.write_text("the last run's log\n")
    before = files_of(run_b)
    code, _, err = run_cli(*TRAIN[:-4], *(str(run_b) if a == "{B}" else a for a in argv), "--trace-log", log)
    assert code == 2 and words in err and err.count("\n") == 1, err
    assert log.read_text() == "the last run's log\n" and files_of(run_b) == before


def test_a_trace_log_is_written_in_a_folder_made_for_it(tmp_path):
    # the folders on its way are made, as every other output's are (outputs.py write_atomic); it was refused as
    # "log_to .../t.log: could not be written (No such file or directory)"
    log = tmp_path / "logs" / "today" / "t.log"
    code, _, err = run_cli(*TRAIN, "--trace-log", log)
    assert code == 0, err
    assert log.read_text().startswith("StepBoundary(step=1, what='begin', micro_steps=1)\n")


def _read_only(folder):
    path = folder / "ro.log"
    path.write_text("the user's file\n")
    path.chmod(0o444)
    return path


def _link_out(folder):
    (folder / "elsewhere").mkdir()
    (folder / "elsewhere" / "precious.txt").write_text("the user's file\n")
    os.symlink(folder / "elsewhere" / "precious.txt", folder / "log.txt")
    return folder / "log.txt"


def _dangling_link(folder):
    os.symlink(folder / "nowhere" / "x.log", folder / "dangling.log")
    return folder / "dangling.log"


@pytest.mark.bad_input("command line", unchanged=True)
@pytest.mark.parametrize("make, words", [
    (lambda folder: folder, "a folder; give a file name in it"),  # was: [Errno 21] Is a directory
    (lambda folder: Path(PROC), "cannot write in /proc"),  # was: [Errno 2]
    (_read_only, "a read-only file"),  # was: [Errno 13] (or, as root, overwritten)
    (_link_out, "a symbolic link (to "),  # was: written through, into the file it points to
    (_dangling_link, "a symbolic link (to "),  # was: made the file it points to
], ids=["folder", "proc", "read-only", "link", "dangling link"])
def test_a_trace_log_that_cannot_be_written_is_refused_in_one_line_naming_it(tmp_path, monkeypatch, make, words):
    monkeypatch.chdir(tmp_path)
    path = make(tmp_path)
    before = files_of(tmp_path)
    code, out, err = run_cli(*TRAIN, "--trace-log", path)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"zerosim train: error: --trace-log {path}: ") and words in err and "Errno" not in err
    assert files_of(tmp_path) == before


@pytest.mark.bad_input("engine arguments", unchanged=True)
def test_the_python_faces_check_the_trace_log_too(run_b, tmp_path):
    before = files_of(run_b)
    with pytest.raises(ValueError, match=r"trace_log .*rank00000.safetensors: inside the checkpoint"):
        TrainConfig(widths=(4, 6, 3), ranks=2, steps=1, trace_log=str(run_b / "step000002" / "rank00000.safetensors"))
    with pytest.raises(ValueError, match=r"log_to .*latest: inside the checkpoint"):
        Cluster(2, log_to=str(run_b / "latest"))
    with pytest.raises(ValueError, match=r"log_to .*: a folder; give a file name in it"):
        Cluster(2, log_to=str(tmp_path))
    assert files_of(run_b) == before


@pytest.mark.bad_input("engine arguments", unchanged=True)
def test_a_chrome_trace_is_checked_as_every_output_is(run_b, tmp_path):
    from zerosim.analysis.timeline import simulate, write_chrome_trace
    from zerosim.collectives import all_reduce

    cluster = Cluster(2)
    all_reduce(cluster, [__import__("numpy").ones(4, "float32")] * 2)
    result = simulate(cluster.trace)
    before = files_of(run_b)
    with pytest.raises(ValueError, match=f"^{tmp_path}: a folder; give a file name in it$"):  # was: a temp file's name
        write_chrome_trace(result, tmp_path)
    with pytest.raises(ValueError, match="inside the checkpoint"):
        write_chrome_trace(result, run_b / "step000002" / "manifest.json")
    os.symlink(run_b / "latest", tmp_path / "t.json")
    with pytest.raises(ValueError, match="a symbolic link"):
        write_chrome_trace(result, tmp_path / "t.json")
    assert files_of(run_b) == before and list(tmp_path.iterdir()) == [tmp_path / "t.json"]
    assert write_chrome_trace(result, tmp_path / "ok.json") == str(tmp_path / "ok.json")  # a plain path: written


@pytest.mark.bad_input("engine arguments", unchanged=True)
def test_the_nccl_graph_file_is_checked_as_every_output_is(run_b, tmp_path):
    from zerosim.frameworks.nccl import ring_environment

    before = files_of(run_b)
    with pytest.raises(ValueError, match="inside the checkpoint"):  # was: zerosim_ring_3.xml written into run B
        ring_environment(3, str(run_b / "step000002"))
    (tmp_path / "precious.txt").write_text("the user's file\n")
    os.symlink(tmp_path / "precious.txt", tmp_path / "zerosim_ring_3.xml")
    with pytest.raises(ValueError, match="a symbolic link"):  # was: written through the link
        ring_environment(3, str(tmp_path))
    assert files_of(run_b) == before and (tmp_path / "precious.txt").read_text() == "the user's file\n"


@pytest.mark.bad_input("command line", unchanged=True)
@pytest.mark.parametrize("argv", [
    (*TRAIN, "--trace-log", "{long}.log"),  # was: the run, then "[Errno 36] log_to ...: could not be written"
    (*TRAIN, "--save", "{long}"),  # was: the run, then "[Errno 36] File name too long: ..."
    ("timeline", "--model", "gpt2-small", "--ranks", "8", "--figure", "{long}.png"),  # was: the timeline, then Errno
    ("explore", "--html", "{long}"),
], ids=["--trace-log", "--save", "--figure", "--html"])
def test_a_name_longer_than_the_file_system_takes_is_refused_before_the_work(tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    argv = [a.format(long="a" * 300) for a in argv]
    flag = next(a for a in argv if a.startswith("--") and "{" not in a and a in ("--trace-log", "--save", "--figure",
                                                                                    "--html"))
    code, out, err = run_cli(*argv)
    assert code == 2 and out == "" and f"error: {flag} aaa" in err and "longer than the file system takes" in err
    assert "Errno" not in err and list(tmp_path.iterdir()) == []
