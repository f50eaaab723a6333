"""benchmarks/plan.py's contenders, as a worker of benchmarks/trees.py steps them: the planner, the README's command in
a fresh process, and the command's work in the worker. Held on a made-up tree whose zerosim says where it was
imported from, so a command started from the wrong tree (the working directory's, which `-m` puts first) shows. No
test here times anything (speed lives in benchmarks)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import trees  # noqa: E402

# a zerosim of a few small files: what plan.py's contenders call, each answering with what it was given
PLANNER = """from types import SimpleNamespace


def plan(config, ranks, per_node, gpu, seq_len, global_batch):
    row = SimpleNamespace(stage=3, strategy=config, micro_batch=global_batch // ranks, step_s=float(seq_len))
    return SimpleNamespace(fitting=[row])
"""
PRESETS = """from types import SimpleNamespace


def get_preset(name):
    return SimpleNamespace(config=f"config of {name}")
"""
CLI = """import os
import sys


TREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv):  # each call noted in the tree's calls.txt, with the process it ran in
    print("made-up", *argv)
    with open(os.path.join(TREE, "calls.txt"), "a") as f:
        print(os.getpid(), *argv, file=f)


if __name__ == "__main__":  # the command: what main prints, then the tree it was imported from
    main(sys.argv[1:])
    print(TREE)
"""
MADE_UP = {"zerosim/__init__.py": "", "zerosim/analysis/__init__.py": "", "zerosim/analysis/costs.py": PRESETS,
           "zerosim/analysis/planner.py": PLANNER, "zerosim/cli/__init__.py": "", "zerosim/cli/main.py": CLI}


def readme_command() -> str:
    """The arguments of the README's `zerosim plan` command (the one plan.py measures), as the README writes them."""
    (line,) = [ln for ln in (ROOT / "README.md").read_text().splitlines() if "zerosim plan --model llama-3-70b" in ln]
    return line.split("zerosim ", 1)[1].strip()


def test_the_workers_contenders_run_the_readmes_command_and_planner_from_the_tree_it_is_given(tmp_path, monkeypatch):
    """The command printed what the made-up tree's zerosim prints for the README's arguments, and names that tree as
    its home, though the working directory is this tree (whose `-m zerosim.cli.main` would print a real plan); the
    work called the same `main` with the same arguments in the worker itself; the planner was called with the
    preset's config and the README's job (16 sequences per GPU, L = 4096)."""
    for path, text in MADE_UP.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    monkeypatch.chdir(ROOT)
    with trees.started({"that": str(tmp_path)}, "plan", "tree_side") as workers:
        worker = workers["that"]
        assert worker.tree == str(tmp_path) and worker.names == ["planner", "command", "work"]
        seconds = [worker.step(name) for name in worker.names]
        printed, rows = worker.fact("printed"), worker.fact("rows")
        pid = worker.proc.pid
    assert all(isinstance(s, float) and s >= 0 for s in seconds)
    readme = readme_command()
    assert readme.startswith("plan --model llama-3-70b --gpus 64 ")  # found the command, not an empty line
    assert printed.decode() == f"made-up {readme}\n{tmp_path}\n"
    assert rows == [(3, "config of llama-3-70b", 16, 4096.0)]
    command, work = (tmp_path / "calls.txt").read_text().splitlines()  # in the order stepped
    assert command.split(" ", 1)[1] == readme and int(command.split()[0]) != pid  # in a process of its own
    assert work == f"{pid} {readme}"  # in the worker
