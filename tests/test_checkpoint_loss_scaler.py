"""A checkpoint keeps the loss scaler's state: a resumed dynamic-scaling run is the uninterrupted run, bit for bit.

The scaler's state (its scale, growth tracker or DeepSpeed's counters) and the iteration count (skipped
steps count there, not in the optimizer's t) go into the manifest; a run that skipped steps before the
save skips and grows at the same steps after the load. Equality is on bit patterns.
"""

import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest
from helpers import as_version_1, bits  # the tests' shared helpers (tests/helpers.py)

from zerosim import MLP, Cluster, ZeroEngine, get_optimizer
from zerosim import checkpoint as ckpt
from zerosim.checkpoint import CheckpointError
from zerosim.cluster import LossScaleUpdate
from zerosim.models import make_regression
from zerosim.precision import get_precision

WIDTHS = [8, 16, 4]
# S starts at 2**16, where this MLP's first gradients overflow fp16; small windows make it grow again within the run
POLICIES = {
    "torch": get_precision("fp16-mixed").with_(loss_scale="torch", loss_scale_options={"growth_interval": 3}),
    "deepspeed": get_precision("fp16-mixed").with_(loss_scale="deepspeed", loss_scale_options={"scale_window": 3}),
}


def decisions(engine) -> list:
    return [(e.step, e.skipped, e.scale_before, e.scale_after) for e in engine.cluster.trace.of_type(LossScaleUpdate)]


@pytest.mark.parametrize("scaler", sorted(POLICIES))
@pytest.mark.parametrize("stage, new_stage", [(2, 2), (1, 3)])  # the same stage, and a reshard to another stage
def test_a_resumed_dynamic_scaling_run_is_the_uninterrupted_run(tmp_path, scaler, stage, new_stage):
    n, steps, cut = 3, 12, 5
    model = MLP(WIDTHS)
    params = model.init_params(np.random.default_rng(0))
    data = make_regression(np.random.default_rng(1), n * steps, 4, WIDTHS)
    batches = [data[s * n : (s + 1) * n] for s in range(steps)]
    whole = ZeroEngine(model, Cluster(n), stage, get_optimizer("adam", lr=1e-2), POLICIES[scaler], params=params)
    for b in batches:
        whole.step(b)
    before, after = decisions(whole)[:cut], decisions(whole)[cut:]
    assert any(d[1] for d in before), before  # the scaler skipped before the save ...
    assert any(d[1] for d in after) and any(d[3] > d[2] for d in after), after  # ... and skips and grows after it

    first = ZeroEngine(model, Cluster(n), stage, get_optimizer("adam", lr=1e-2), POLICIES[scaler], params=params)
    for b in batches[:cut]:
        first.step(b)
    ckpt.save(first, str(tmp_path))
    resumed = ckpt.load(str(tmp_path), Cluster(n), model, stage=new_stage)
    assert resumed.scaler.state_dict() == first.scaler.state_dict()
    assert (resumed.t, resumed.iteration) == (first.t, cut) and first.t < cut
    for b in batches[cut:]:
        resumed.step(b)
    assert decisions(resumed) == decisions(whole)[cut:]
    assert resumed.scaler.state_dict() == whole.scaler.state_dict()
    assert (resumed.t, resumed.iteration) == (whole.t, whole.iteration)
    assert np.array_equal(bits(resumed.full_master()), bits(whole.full_master()))
    for k, v in resumed.full_optimizer_state().items():
        assert np.array_equal(bits(v), bits(whole.full_optimizer_state()[k])), k
    assert np.array_equal(bits(resumed.full_params()), bits(whole.full_params()))


def test_train_with_dynamic_scaling_saves_and_resumes_the_same_run(tmp_path):
    from zerosim.cli.main import main

    def run(*argv):
        out = io.StringIO()
        with redirect_stdout(out):
            assert (
                main(
                    [
                        "train",
                        "--json",
                        "--steps",
                        "8",
                        "--stage",
                        "2",
                        "--precision",
                        "fp16-mixed",
                        "--loss-scale",
                        "torch",
                        "--scale-window",
                        "2",
                        "--widths",
                        "8,16,4",
                        *argv,
                    ]
                )
                == 0
            )
        return json.loads(out.getvalue())

    whole = run()
    # it overflowed before the save at step 4, and after
    assert whole["skipped"] and whole["skipped"][0] < 4 < whole["skipped"][-1]
    run("--save", str(tmp_path), "--save-every", "4")
    (tmp_path / "latest").write_text("step000004\n")
    resumed = run("--resume", str(tmp_path))
    assert resumed["first_step"] == 5
    assert resumed["losses"] == whole["losses"][4:] and resumed["scales"] == whole["scales"][4:]


@pytest.mark.bad_input("checkpoint files", unchanged=True)
def test_a_manifest_from_before_the_recipes_is_read_or_refused(tmp_path):
    # Manifests written before the recipes had names hold `average`: "avg" is today's "seeds" (and unscaled by
    # dividing, as then); the other averages are refused, naming what is wrong.
    model = MLP(WIDTHS)
    engine = ZeroEngine(model, Cluster(2), 1, get_optimizer("adam"), "fp16-mixed")
    folder = ckpt.save(engine, str(tmp_path))
    path = f"{folder}/manifest.json"
    manifest = as_version_1(json.loads(open(path).read()))  # an old manifest: no checksums
    for key in ("reduction", "unscale", "allreduce", "loss_scale_options"):
        del manifest["precision"][key]
    manifest["precision"]["average"] = "avg"
    manifest["loss_scaler"] = {"kind": "static", "scale": 1.0}
    open(path, "w").write(json.dumps(manifest))
    loaded = ckpt.load(str(tmp_path), Cluster(2), model)
    assert (loaded.precision.reduction, loaded.precision.unscale) == ("seeds", "divide")
    manifest["precision"]["average"] = "avg_premul"
    open(path, "w").write(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="saved with averaging 'avg_premul', which zerosim now offers only as the "
                                              "named recipes"):
        ckpt.load(str(tmp_path), Cluster(2), model)


@pytest.mark.bad_input("checkpoint files", unchanged=True)
def test_a_scaler_that_does_not_match_the_policy_is_refused(tmp_path):
    model = MLP(WIDTHS)
    folder = ckpt.save(ZeroEngine(model, Cluster(2), 1, get_optimizer("adam"), POLICIES["torch"]), str(tmp_path))
    manifest = as_version_1(json.loads(open(f"{folder}/manifest.json").read()))  # its own check, not the checksum
    manifest["loss_scaler"]["kind"] = "deepspeed"
    open(f"{folder}/manifest.json", "w").write(json.dumps(manifest))
    cluster = Cluster(2)
    with pytest.raises(CheckpointError, match="its loss scaler is 'deepspeed', but its precision policy names 'torch'"):
        ckpt.load(str(tmp_path), cluster, model)
    assert all(not r.ledger.live for r in cluster.ranks)
