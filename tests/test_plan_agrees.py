"""Issue 35, item 6: the planner accepts exactly what `memory` and `timeline` accept, and every command it prints runs.

On main `plan --gpus 12 --gpus-per-node 8` planned, and the `timeline` command it printed to reproduce its top row
refused the same setup; `plan --gpus 8 --gpus-per-node 3` ran where both commands refuse; `memory --gpus-per-node
16 --ranks 8` ignored the flag (the stages' table has no link tiers)."""

import io
import shlex
from contextlib import redirect_stderr, redirect_stdout

import pytest

from zerosim.cli.main import main


def run(argv) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def plan_argv(gpus: int, per_node: int) -> list:
    return ["plan", "--model", "gpt2-small", "--gpus", str(gpus), "--gpus-per-node", str(per_node), "--gpu",
            "h100-80gb", "--seq-len", "128", "--global-batch", str(2 * gpus), "--stages", "1,3", "--strategies",
            "none", "--micro-batches", "1,2"]


# (GPUs, GPUs per node): whole nodes, one node partly filled, and nodes that do not fill
GRID = [(8, 8), (16, 8), (4, 8), (12, 8), (8, 3), (9, 3), (6, 4), (1, 8)]


@pytest.mark.parametrize("gpus, per_node", GRID)
def test_plan_accepts_what_timeline_accepts_and_its_commands_run(gpus, per_node):
    timeline = run(["timeline", "--model", "gpt2-small", "--ranks", str(gpus), "--gpus-per-node", str(per_node),
                    "--stage", "1"])
    code, out, err = run(plan_argv(gpus, per_node))
    assert (code == 0) == (timeline[0] == 0), (err, timeline[2])
    if code != 0:
        assert err.count("\n") == 1 and "does not fill nodes of --gpus-per-node" in err, err
        return
    printed = ("  zerosim memory", "  zerosim timeline")
    commands = [line.strip() for line in out.splitlines() if line.startswith(printed)]
    assert len(commands) == 2, out
    for command in commands:
        c, _, e = run(shlex.split(command)[1:])
        assert c == 0, f"{command}\n{e}"


@pytest.mark.bad_input("planner")
@pytest.mark.parametrize("argv, message", [
    (plan_argv(12, 8), "--gpus 12 does not fill nodes of --gpus-per-node 8: give a multiple of 8 (e.g. 8 or 16)"),
    (plan_argv(8, 3), "--gpus 8 does not fill nodes of --gpus-per-node 3: give a multiple of 3 (e.g. 6 or 9)"),
    (["memory", "--model", "gpt2-small", "--ranks", "8", "--gpus-per-node", "16"],
     "--gpus-per-node places the ranks on nodes for --strategy, --tp or --zero-quantized-gradients"),
    (["memory", "--model", "gpt2-small", "--ranks", "16", "--gpus-per-node", "8"],
     "the stages' memory does not depend on it"),
])
def test_flags_that_cannot_apply_are_refused(argv, message):
    code, out, err = run(argv)
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert out == ""


def test_the_library_planner_refuses_what_a_cluster_refuses():
    from zerosim.analysis.costs import get_preset
    from zerosim.analysis.planner import plan

    with pytest.raises(ValueError, match=r"ranks=12 does not fill nodes of gpus_per_node=8: give a multiple of 8"):
        plan(get_preset("gpt2-small").config, 12, 8, "h100-80gb", 128, 24)


def _json(argv) -> dict:
    code, out, err = run([*argv, "--json"])
    assert code == 0, err
    import json

    return json.loads(out)


# plan's top row beside each parallel degree, and the two commands it prints to reproduce it: the same peak (memory's
# row for that stage, timeline's), the same step, tokens/s and MFU (timeline's). The pipeline case is one whose last
# stage peaks highest, where timeline read rank 0's peak until 2026-11-28 (a random walk over plan's flags found it).
REPRODUCED = {
    "tp": ["--model", "gpt2-small", "--gpus", "8", "--seq-len", "512", "--global-batch", "16", "--tp", "2",
           "--strategies", "block"],
    "cp": ["--model", "gpt2-small", "--gpus", "8", "--seq-len", "512", "--global-batch", "16", "--cp", "2",
           "--strategies", "flash"],
    "pp": ["--model", "llama-2-7b", "--gpus", "8", "--gpu", "a100-80gb", "--seq-len", "2048", "--global-batch", "32",
           "--pp", "2", "--strategies", "block", "--stages", "1", "--micro-batches", "1"],
    "offload": ["--model", "gpt2-small", "--gpus", "8", "--seq-len", "512", "--global-batch", "16",
                "--offload-optimizer", "cpu", "--strategies", "none", "--stages", "2"],
}


@pytest.mark.parametrize("case", sorted(REPRODUCED))
def test_the_commands_plan_prints_say_its_rows_numbers(case):
    argv = ["plan", "--gpus-per-node", "8", *REPRODUCED[case]]
    if "--gpu" not in argv:
        argv += ["--gpu", "h100-80gb"]
    r = _json(argv)
    top = r["fitting"][0]
    memory_cmd, timeline_cmd = r["reproduce"]
    memory = _json(shlex.split(memory_cmd)[1:])
    timeline = _json(shlex.split(timeline_cmd)[1:])
    row = next(x for x in memory["stages"] if x["stage"] == top["stage"])
    assert row["peak"] == timeline["peak"] == top["peak"]
    for key in ("step_s", "tokens_per_s_per_gpu", "mfu"):
        assert timeline[key] == pytest.approx(top[key], rel=1e-12), key
