"""`zerosim diff` and its logical checkpoints: a recorder changes no bit of the run it watches, identical runs say so,
the report's JSON holds what the issue names, the float64 yardstick is the float64 run's, and bad input is refused
naming the flag."""

import contextlib
import dataclasses
import io
import json

import numpy as np
import pytest

from zerosim.cli.diff_cmd import config_from_flags
from zerosim.cli.main import main
from zerosim.diff import diff
from zerosim.diff._record import Recorder
from zerosim.train import TrainConfig, train

SMALL = TrainConfig(widths=(4, 6, 3), batch=2, steps=2)


def _cli(*argv) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return out.getvalue()


@pytest.mark.parametrize("changes", [dict(stage=3, accumulation_steps=2), dict(stage=0, ranks=3),
                                     dict(stage=1, precision="fp16-mixed", clip_grad=0.1),
                                     dict(model="gpt", ranks=2, tp=2)])
def test_a_recorder_changes_no_bit_of_the_run(changes):
    # the observer only reads what the trace records; the losses and the final weights of a watched run are the bits
    # of the same run alone (what `zerosim train` prints)
    config = dataclasses.replace(SMALL, **changes) if "model" not in changes else TrainConfig(steps=2, **changes)
    alone = train(config)
    recorder = Recorder()
    watched = train(config, observer=recorder)
    assert alone.losses == watched.losses
    assert np.array_equal(np.asarray(recorder.steps[config.steps].flats[(1 << 30, "new master")]).view(np.uint32),
                          np.asarray(_master(config)).view(np.uint32))


def _master(config):
    recorder = Recorder(full=False)  # the weights only, read from the engine after the run's own steps
    train(config, observer=recorder)
    return recorder.steps[config.steps].flats[(1 << 30, "new master")]


def test_identical_configurations_say_identical():
    report = diff(SMALL, SMALL)
    assert report.identical and report.parting is None and report.event_a is None
    assert report.as_json()["identical"] is True
    assert "identical: every logical tensor of every step has the same bits" in report.text()
    assert [g.rel_error for g in report.growth] == [0.0, 0.0]


def test_the_json_names_the_parting():
    out = json.loads(_cli("diff", "--a", "--widths 4,6,3 --batch 2 --ranks 2 --accumulation-steps 2", "--b",
                          "--widths 4,6,3 --batch 2", "--steps", "1", "--json"))
    assert out["identical"] is False
    for key in ("first_step", "tensor", "index", "event_a", "event_b", "cause"):
        assert out[key] is not None, key
    assert out["first_step"] == 1 and out["tensor"].startswith("reduced:")
    assert out["event_a"]["what"] == "ring hop" and isinstance(out["event_a"]["value"], float)
    assert len(out["growth"]) == 1


def test_the_float64_values_are_the_float64_runs():
    # the yardstick of a parting in the new master weights: a float64 run on one rank of the same configuration,
    # trained here by hand, holds the value the report shows
    a, b = dataclasses.replace(SMALL, clip_grad=0.001, steps=1), dataclasses.replace(SMALL, steps=1)
    report = diff(a, b)
    exact = Recorder(full=False)
    train(dataclasses.replace(a, precision="fp64", ranks=1, stage=0, accumulation_steps=4), observer=exact)
    assert report.parting.tensor.kind == "grad32"
    assert report.values.float64_b is not None and abs(report.values.float64_b - float(report.values.b)) < 1e-2
    # the growth's distance to float64 is the relative L2 of the weights, worked out here from the two runs
    mine = Recorder(full=False)
    train(a, observer=mine)
    w, f = (np.asarray(r.steps[1].flats[(1 << 30, "new master")], np.float64) for r in (mine, exact))
    assert report.growth[0].a_to_float64 == pytest.approx(np.linalg.norm(w - f) / np.linalg.norm(f), rel=1e-12)


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("a, b, steps, words", [
    ("--no-such-flag", "", 1, "--a '--no-such-flag': unrecognized arguments"),
    ("", "--stage 7", 1, "--b '--stage 7'"),
    ("--steps 3", "", 1, "give --steps to diff itself"),
    ("--save out", "", 1, "--a '--save out': --save: what a run writes and prints is not for diff"),
    ("", "--print-every 2", 1, "--b '--print-every 2': --print-every: what a run writes and prints is not for diff"),
    ("--json", "", 1, "--a '--json': --json: what a run writes and prints is not for diff"),  # was taken, dropped
    ("", "--save-every 2 --overwrite", 1, "--save-every, --overwrite: what a run"),  # was: give a --save (refused)
    ("--resume ckpt --trace-log t.log", "", 1, "--trace-log, --resume: what a run"),
    ("--widths 4,8,3", "--widths 4,6,3", 1, "different models"),
    ("'unclosed", "", 1, "--a"),
    ("", "", 0, "--steps must be at least 1"),
    ("--backend mpi --ranks 2", "", 1, "numpy backend"),
    ("--model gpt --ranks 4 --tp 4 --heads 4", "--model gpt --ranks 1 --heads 4", 1,
     "pads the vocabulary as Megatron does: 512 rows in run A, 6 in run B"),
])
def test_bad_input_names_the_flag(a, b, steps, words, capsys):
    assert main(["diff", "--a", a, "--b", b, "--steps", str(steps)]) == 2
    said = capsys.readouterr()
    assert said.err.startswith("zerosim diff: error: ") and words in said.err, said.err
    assert said.out == ""  # refused before either run printed anything


def test_a_single_flag_is_a_string_too():
    # `--a --checkpoint`: the word after --a is run A's flags even when argparse would take it for an option
    out = json.loads(_cli("diff", "--a", "--checkpoint", "--b", "", "--steps", "1", "--json"))
    assert out["identical"] is True  # activation checkpointing recomputes the same bits


def test_flags_mean_what_they_mean_in_train():
    config = config_from_flags("--stage 3 --ranks 2 --precision fp16-mixed --clip-grad 0.5", "A")
    assert (config.stage, config.ranks, config.clip_grad) == (3, 2, 0.5)
    assert config.precision.compute == "fp16"


def test_the_float64_value_is_in_each_runs_units():
    # DeepSpeed ZeRO-2's recipe keeps the reduced gradient divided by N = 4 already, the seeds' recipe keeps the sum:
    # one float64 run serves both, its value shown in each run's units — exactly a quarter in run A's
    from zerosim.precision import get_precision

    a = dataclasses.replace(SMALL, steps=1, precision=get_precision("bf16-mixed").with_(reduction="deepspeed-zero12"))
    report = diff(a, dataclasses.replace(SMALL, steps=1))
    assert report.parting.tensor.kind == "reduced"
    assert report.values.float64_b == 4 * report.values.float64_a
    assert abs(report.values.float64_a - float(report.values.a)) < 0.05 * abs(report.values.float64_a) + 1e-3


@pytest.mark.parametrize("ulps, shown", [
    (1.0, "1"),  # one ulp apart: as it is
    (0.5, "0.5"),  # a median between two weights' distances
    (999.5, "999.5"),  # below a thousand: four significant digits at most
    (2206.0, "2,206"),  # from a thousand on, whole with commas
    (12854.0, "12,854"),  # the tutorial's run at step 9: printed as 1.285e+04 before
])
def test_the_growth_tables_ulps_read_as_numbers(ulps, shown):
    from zerosim.diff._report import _ulps

    assert _ulps(ulps) == shown
