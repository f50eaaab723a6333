"""One resume rule for the command line and for Python (issue 20, item 5).

What a resume leaves out is the saved run's: stage, rank count, precision, optimizer and its
hyperparameters, K. A stage or rank count given reshards; another precision or optimizer kind is refused.
`zerosim train --resume`, `TrainConfig(resume=...)` and `ZeroEngine.load` all follow it.
"""

import io
import json
from contextlib import redirect_stdout

import pytest

from zerosim import MLP, Cluster
from zerosim import checkpoint as ckpt
from zerosim.cli.main import main
from zerosim.train import TrainConfig, train

SAVED = ["--stage", "3", "--ranks", "2", "--precision", "fp16-mixed", "--optimizer", "lion", "--lr", "1e-3",
         "--accumulation-steps", "2", "--widths", "8,16,4", "--seed", "3", "--batch", "5", "--task", "classification"]


def run(*argv) -> tuple:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["train", "--json", *argv])
    return code, (json.loads(out.getvalue()) if code == 0 else None)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A run saved at step 2 of 4 with no default setting, and the uninterrupted run's losses."""
    directory = tmp_path_factory.mktemp("resume") / "ckpt"
    code, whole = run(*SAVED, "--steps", "4")
    assert code == 0
    code, _ = run(*SAVED, "--steps", "2", "--save", str(directory))
    assert code == 0
    return str(directory), whole["losses"]


def test_a_resume_that_leaves_everything_out_continues_the_saved_run(saved):
    directory, whole = saved
    # the model's shape is not the run's: given again; the rest (the data's seed, batch and task among it) is saved.
    # A --batch left out was filled with the default 16 by the command and refused beside the saved batch.
    code, resumed = run("--resume", directory, "--steps", "4", "--widths", "8,16,4")
    assert code == 0 and resumed["first_step"] == 3
    assert resumed["losses"] == whole[2:]  # stage 3, 2 ranks, fp16-mixed, lion at 1e-3, K = 2, B = 5: bit for bit
    assert len(resumed["ranks"]) == 2  # not the default 4


def test_the_python_config_follows_the_same_rule(saved):
    directory, whole = saved
    config = TrainConfig(widths=(8, 16, 4), steps=4, resume=directory)
    settings = (config.stage, config.ranks, config.optimizer, config.lr, config.accumulation_steps, config.seed,
                config.batch, config.task)
    assert settings == (3, 2, "lion", 1e-3, 2, 3, 5, "classification")
    assert config.precision.compute == "fp16"
    assert train(config).losses == whole[2:]
    fresh = TrainConfig()  # no resume: the defaults
    assert (fresh.stage, fresh.ranks, fresh.precision, fresh.optimizer, fresh.lr, fresh.accumulation_steps) == \
        (2, 4, "bf16-mixed", "adam", 1e-2, 1)


def test_zeroengine_load_keeps_the_saved_stage_and_takes_the_clusters_ranks(saved):
    directory, _ = saved
    engine = ckpt.load(directory, Cluster(2), MLP([8, 16, 4]))
    kept = (engine.stage_number, engine.cluster.world_size, engine.optimizer.name, engine.accumulation_steps)
    assert kept == (3, 2, "lion", 2)
    assert ckpt.load(directory, Cluster(3), MLP([8, 16, 4]), stage=1).stage_number == 1  # asked for: resharded


def test_a_stage_or_rank_count_given_reshards(saved):
    directory, _ = saved
    code, resumed = run("--resume", directory, "--steps", "4", "--widths", "8,16,4", "--seed", "3",
                        "--stage", "1", "--ranks", "3")
    assert code == 0 and resumed["first_step"] == 3 and len(resumed["ranks"]) == 3


@pytest.mark.bad_input("command line", unchanged=True)
@pytest.mark.parametrize("flags, words", [
    (["--precision", "bf16-mixed"], "saved with precision compute='fp16', not the compute='bf16' asked for"),
    (["--optimizer", "adam"], "its optimizer state is lion's; it cannot resume adam"),
])
def test_another_precision_or_optimizer_is_refused(saved, flags, words, capsys):
    directory, _ = saved
    from pathlib import Path

    before = {p: p.read_bytes() for p in Path(directory).rglob("*") if p.is_file()}
    code, _ = run("--resume", directory, "--steps", "4", "--widths", "8,16,4", *flags)
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1, err
    assert {p: p.read_bytes() for p in Path(directory).rglob("*") if p.is_file()} == before


def test_the_help_says_the_defaults_the_config_fills():
    # `zerosim train --help` types each default; TrainConfig fills them (RUN_DEFAULTS), and the command leaves them
    # unset so that a resume takes the saved run's instead (a batch the command filled itself broke that rule)
    import argparse
    import re

    from zerosim.cli import train_cmd
    from zerosim.train import RUN_DEFAULTS

    parser = argparse.ArgumentParser()
    train_cmd.add_arguments(parser)
    said = {action.dest: re.search(r"\(default ([^;)]+)", action.help).group(1)
            for action in parser._actions if action.dest in RUN_DEFAULTS}
    assert set(said) == set(RUN_DEFAULTS)
    for name, value in RUN_DEFAULTS.items():
        assert type(value)(said[name]) == value, name
        assert parser.get_default(name) is None, name  # unset: TrainConfig's default, or the saved run's
