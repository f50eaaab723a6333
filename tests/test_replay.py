"""`zerosim replay --json` gives seed 004's numbers, read from the live run (table rows from the seed).

Exact equality where the arithmetic is exact in fp16/fp32 (the gradients: small multiples of 0.5);
elsewhere the tolerance is the fp32 rounding budget of the operations that made the value.
"""

import io
import json
from contextlib import redirect_stdout

import pytest

from zerosim.cli.main import main

U32 = 2.0**-24  # fp32 unit roundoff


def gamma(k):
    return k * U32 / (1 - k * U32)  # Higham's bound for k roundings


def run_json(*args):
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["replay", "--json", *args]) == 0
    return json.loads(out.getvalue())


@pytest.fixture(scope="module", params=[0, 1, 2, 3])
def replayed(request):
    return request.param, run_json("--stage", str(request.param))


def test_local_gradients(replayed):
    _, r = replayed
    g0, g1 = r["steps"][0]["gpus"]
    assert g0["local_grads"] == [0, 0, 0, -4.5]  # GPU 0: h = -7, ReLU kills w1, w2, w3; dL/dy = -4.5
    assert g1["local_grads"] == [-11, -5.5, -5.5, -5.5]  # GPU 1: h = 1, dL/dy = -5.5, x = [2, 1]
    assert (g0["loss"], g1["loss"]) == (10.125, 15.125)


def test_averaged_shards(replayed):
    stage, r = replayed
    g0, g1 = r["steps"][0]["gpus"]
    if stage == 0:  # plain data parallel: every GPU holds and updates everything
        assert g0["owns"] == g1["owns"] == ["w1", "w2", "w3", "w4"]
        assert g0["averaged_shard"] == g1["averaged_shard"] == [-5.5, -2.75, -2.75, -5.0]
        return
    assert g0["owns"] == ["w1", "w2"] and g1["owns"] == ["w3", "w4"]
    assert g0["averaged_shard"] == [-5.5, -2.75]  # (0 - 11)/2, (0 - 5.5)/2: exact in fp16 and fp32
    assert g1["averaged_shard"] == [-2.75, -5.0]  # (0 - 5.5)/2, (-4.5 - 5.5)/2


SEED_ADAM = {  # per weight: m, v, fp32 master (seed 004, step 3), and the real fp16 copy of the master
    "w1": (-0.55, 0.03025, 2.1, 2.099609375),
    "w2": (-0.275, 0.0075625, -2.9, -2.900390625),
    "w3": (-0.275, 0.0075625, 1.1, 1.099609375),
    "w4": (-0.5, 0.025, 0.6, 0.60009765625),
}


def test_adam_states_and_masters(replayed):
    _, r = replayed
    for gpu in r["steps"][0]["gpus"]:
        for j, name in enumerate(gpu["owns"]):
            m, v, master, fp16 = SEED_ADAM[name]
            # m = fl(fl(0.1) * g): two roundings; v = fl(fl(0.001) * fl(g*g)): three
            assert abs(gpu["adam"]["m"][j] - m) <= gamma(2) * abs(m)
            assert abs(gpu["adam"]["v"][j] - v) <= gamma(3) * abs(v)
            # the update lr*m_hat/(sqrt(v_hat)+eps) = 0.1 takes ~8 roundings, the subtraction one more
            assert abs(gpu["master"][j] - master) <= gamma(8) * 0.1 + U32 * abs(master)
            assert gpu["compute_shard"][j] == fp16  # exact: the fp16 truth
    assert (
        r["final_params"][0][:4] == [2.099609375, -2.900390625, 1.099609375, 0.60009765625] if r["stage"] < 3 else True
    )


def test_stage_specific_communication(replayed):
    stage, r = replayed
    step = r["steps"][0]
    if stage == 0:
        assert step["all_gather"] == [] and {h["collective"] for h in step["reduce_scatter"]} == {"all_reduce"}
    elif stage == 3:
        assert step["all_gather"] == []  # no all-gather after the step
        assert len({h["call"] for h in step["stage3_gathers"]}) == 5  # seed 004: L1, L2, L1 (recompute), L2, L1
    else:
        gathered = sorted((h["src"], tuple(h["values"])) for h in step["all_gather"])
        assert gathered == [(0, (2.099609375, -2.900390625)), (1, (1.099609375, 0.60009765625))]


def test_pure_precision_and_tiny_lr_flags_reach_the_run():
    r = run_json("--precision", "fp16-pure", "--lr", "1e-5", "--steps", "3")
    assert len(r["steps"]) == 3
    # 1e-5 is far below half an fp16 ulp at every seed weight (>= 2**-12 at 0.5): nothing moves
    assert r["final_params"][0][:4] == [2.0, -3.0, 1.0, 0.5]


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("steps", ["0", "100000"])  # 100,000 narrated steps ran for hours, silent on a pipe
def test_bad_arguments_are_clear_errors(steps, capsys):
    assert main(["replay", "--steps", steps]) == 2
    err = capsys.readouterr().err
    assert f"--steps must be 1..1000, got {steps}: the replay narrates every step" in err and err.count("\n") == 1


# -- what a learner must not be misled by (issue: teaching that a lecturer can stand behind) ----------

def test_stage0_all_reduce_names_its_two_phases_and_what_each_chunk_carries():
    r = run_json("--stage", "0")
    hops = r["steps"][0]["reduce_scatter"]
    # seed 004: GPU 0's gradients [0, 0, 0, -4.5], GPU 1's [-11, -5.5, -5.5, -5.5]; chunk 1 = w3, w4
    assert [(h["phase"], h["step"], h["src"], h["chunk"], h["values"]) for h in hops] == [
        ("reduce-scatter", 0, 0, 1, [0, -4.5]),  # GPU 0's own gradients for w3, w4
        ("reduce-scatter", 0, 1, 0, [-11, -5.5]),  # GPU 1's own gradients for w1, w2
        ("all-gather", 0, 0, 0, [-11, -5.5]),  # the summed chunk 0: 0 + -11, 0 + -5.5
        ("all-gather", 0, 1, 1, [-5.5, -10]),  # the summed chunk 1: 0 + -5.5, -4.5 + -5.5
    ]
    text = io.StringIO()
    with redirect_stdout(text):
        main(["replay", "--stage", "0"])
    assert "reduce-scatter phase, step 0" in text.getvalue() and "all-gather phase, step 0" in text.getvalue()
    assert "carrying the summed chunk [-5.5, -10]" in text.getvalue()


@pytest.mark.parametrize("stage", [1, 2])
def test_the_inconsistent_model_before_the_all_gather(stage):
    # Seed 004: after the update and before the all-gather GPU 0 holds [2.1, -2.9, 1.0, 0.5] (new w1, w2;
    # old w3, w4) and GPU 1 [2.0, -3.0, 1.1, 0.6] — in fp16, 2.1 is really 2.099609375 and so on.
    g0, g1 = run_json("--stage", str(stage))["steps"][0]["gpus"]
    assert g0["params_before_refresh"] == [2.099609375, -2.900390625, 1.0, 0.5]
    assert g1["params_before_refresh"] == [2.0, -3.0, 1.099609375, 0.60009765625]


def test_each_peak_is_explained_by_the_buffers_live_at_it():
    peaks = {}
    for stage in (1, 2, 3):
        phases = run_json("--stage", str(stage))["steps"][0]["memory"][0]
        for p in phases:
            assert sum(b["bytes"] for b in p["at_peak"]) == p["peak_bytes"]  # the named buffers add up to the peak
        peaks[stage] = max(p["peak_bytes"] for p in phases)
    # Stage 1 peaks in forward with 40 B of model states (8 params + 8 grads + 8 master + 8 m + 8 v) and the
    # checkpointed input (4) and the loss cache (4); stage 2 holds a 4 B gradient shard instead of 8 B, and
    # at its peak (backward of layer 2) layer 2's fresh gradients (4 B) and two saved inputs (4 + 2 B).
    assert peaks == {1: 48, 2: 46, 3: 46}
