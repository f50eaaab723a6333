"""The reports are the library's (zerosim.analysis.reports): what `zerosim memory`, `timeline` and `plan` print with
--json is a record's `to_dict()` that Python builds from the same choices without the command line.

Each test builds the workload by hand (the model, the micro-batch, the schedule, the formats, the mesh), asks the
library for the report and compares its `to_dict()`, through the same `json.dumps`, with the command's --json: byte
for byte, so a number the command computed on its own (outside the library) would show here.
"""

import io
import json
from contextlib import redirect_stdout

import pytest

from zerosim.analysis.costs import get_preset, parse_efficiency
from zerosim.analysis.reports import Workload, memory_report, strategy_memory_report, timeline_step
from zerosim.analysis.timeline import Hardware, TimeModel
from zerosim.cli.main import main
from zerosim.models.gpt import MetaGPT, strategy_options
from zerosim.parallel.data import get_comm_schedule
from zerosim.parallel.data.multinode import DataMesh
from zerosim.precision import get_precision


def cli_json(argv) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def printed(report) -> str:
    return json.dumps(report.to_dict(), indent=1) + "\n"  # as the commands print it


@pytest.fixture(scope="module")
def work():
    """gpt2-small in eager kernels (the commands' default), 2 sequences of 256 tokens per rank, seed 004's schedule,
    fp16-mixed, Adam."""
    config = get_preset("gpt2-small").config
    model = MetaGPT.from_config(config, 256, kernels="eager", loss="eager", **strategy_options("none"))
    return Workload(model, (2, 256), get_comm_schedule("seed"), "fp16-mixed", "fp16-mixed", "adam", config=config,
                    checkpointing="none")


def test_memory_json_is_the_reports_dict(work):
    report = memory_report(work, 8, unit="block")
    assert printed(report) == cli_json(["memory", "--model", "gpt2-small", "--ranks", "8", "--seq-len", "256",
                                        "--batch", "2", "--json"])
    assert [row["stage"] for row in report.stages] == [0, 1, 2, 3]


def test_strategy_memory_json_is_the_reports_dict(work):
    meshes = [DataMesh.of("hsdp", 16, 4, None), DataMesh.of("hpz", 16, 4, 2)]
    report = strategy_memory_report(work, meshes)
    assert printed(report) == cli_json(["memory", "--model", "gpt2-small", "--ranks", "16", "--seq-len", "256",
                                        "--batch", "2", "--gpus-per-node", "4", "--strategy", "hsdp,hpz",
                                        "--hpz-group", "2", "--json"])
    assert [(r["strategy"], r["group"], r["replicas"]) for r in report.strategies] == [("hsdp", 4, 4), ("hpz", 2, 1)]


def test_timeline_json_is_the_reports_dict(work):
    time_model = TimeModel(parse_efficiency("eager"), False, "eager")  # eager kernels' preset, as --kernels eager
    hardware = Hardware("h100", "nvlink4", get_precision("fp16-mixed").compute)
    report = timeline_step(work, DataMesh.of(3, 8), hardware, time_model=time_model)
    assert printed(report) == cli_json(["timeline", "--model", "gpt2-small", "--ranks", "8", "--seq-len", "256",
                                        "--batch", "2", "--json"])
    assert "timeline" not in report.to_dict() and report.timeline.step_time == report.step_s  # kept, not printed
