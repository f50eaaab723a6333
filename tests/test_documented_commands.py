"""Issue 35, item 1: every command a command's --help documents runs, and every strategy runs in `memory` and
`timeline` with its framework's recipe (FSDP2's resharding strategies stopped with "no_reshard is fsdp2's; its
gradients follow reduction 'fsdp2' or 'seeds', not 'deepspeed-zero3'", and so did `memory --strategy all`).

The examples are read from the commands' own docstrings (test_cli_help.source_examples), so a new example is
tested the day it is written; a CONFIG.json / ds_config.json they name is a shipped config copied in place."""

import io
import shlex
import shutil
from contextlib import redirect_stderr, redirect_stdout

import pytest
from test_cli_help import source_examples
from test_readme_commands import RUN

from zerosim.cli.main import command as command_module
from zerosim.cli.main import main
from zerosim.models.hf import shipped_config
from zerosim.parallel.data import STRATEGIES

SLOW = ("--sweep", "--strategy all", "plan --model llama-3-70b", "plan --config")  # over a second each here


def examples(command: str) -> list:
    """The command's documented examples, continuation lines joined, comments dropped, as argv lists."""
    out, held = [], ""
    for line in source_examples(command_module(command)):
        held += " " + line.strip().rstrip("\\")
        if not line.rstrip().endswith("\\"):
            out.append(shlex.split(held.split("#")[0])[1:])
            held = ""
    return out


def run(argv) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


CASES = [argv for command in ("memory", "timeline", "plan") for argv in examples(command)]


def pages_run() -> set:
    """The zerosim commands a docs page or the README runs (tests/test_readme_commands.py), as argv tuples: an example
    one of them runs is run there, as a user types it, and what it prints checked; here it would run a second time
    (the 70B plan beside TP, ~8 s)."""
    out = set()
    for line, _ in RUN:
        for part in line.split(" && "):
            part = part.split("#", 1)[0].strip()
            if part.startswith(".venv/bin/zerosim "):
                out.add(tuple(shlex.split(part)[1:]))
    return out


PAGES_RUN = pages_run()


def _case(a: list):
    if tuple(a) in PAGES_RUN:
        return pytest.param(a, marks=pytest.mark.skip(reason="a page runs it: tests/test_readme_commands.py"))
    return pytest.param(a, marks=pytest.mark.slow) if any(s in " ".join(a) for s in SLOW) else a


@pytest.mark.parametrize("argv", [_case(a) for a in CASES], ids=[" ".join(a)[:80] for a in CASES])
def test_every_documented_example_runs(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(shipped_config("llama-3-8b"), "config.json")
    (tmp_path / "ds_config.json").write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}, '
                                             '"bf16": {"enabled": true}}')
    code, out, err = run(argv)
    assert code == 0, err
    assert out


def test_the_examples_are_found():
    assert len(examples("memory")) >= 10 and len(examples("timeline")) >= 7 and len(examples("plan")) >= 3
    assert ["memory", "--model", "gpt3-175b", "--ranks", "4096", "--gpus-per-node", "8", "--strategy", "all",
            "--shard-group", "64"] in examples("memory")


# the flag that sizes each strategy's group (docs/explanation/many-nodes.md); the others have no group to size
GROUP_FLAG = {"hsdp": "--shard-group", "hsdp_no_sync": "--shard-group", "mics": "--shard-group",
              "mics_hierarchical": "--shard-group", "hpz": "--hpz-group", "reshard_to_group": "--hpz-group"}


@pytest.mark.parametrize("command", ["memory", "timeline"])
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_runs_in_memory_and_timeline(command, strategy, capsys):
    group = [GROUP_FLAG[strategy], "16"] if strategy in GROUP_FLAG else []
    assert main([command, "--model", "gpt2-small", "--ranks", "32", "--gpus-per-node", "8", "--strategy", strategy,
                 *group, "--json"]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out


def test_memory_strategy_all_follows_each_framework(capsys):
    assert main(["memory", "--model", "gpt2-small", "--ranks", "32", "--gpus-per-node", "8", "--strategy", "all",
                 "--shard-group", "16", "--json"]) == 0
    import json

    rows = {r["strategy"]: r["recipe"] for r in json.loads(capsys.readouterr().out)["strategies"]}
    # FSDP2's strategies run with FSDP2's recipe, DeepSpeed's (MiCS, hpZ) with ZeRO-3's (_plan.py `framework`)
    # but no_reshard_no_sync, FSDP2's beside a pipeline, with zerosim's flat one (FSDP2's there is not modelled)
    assert rows == {"full_shard": "fsdp2", "no_reshard": "fsdp2", "reshard_to_group": "fsdp2", "hpz": "deepspeed-zero3",
                    "no_reshard_no_sync": "seeds",
                    "hsdp": "fsdp2", "hsdp_no_sync": "fsdp2", "mics": "deepspeed-zero3",
                    "mics_hierarchical": "deepspeed-zero3"}
