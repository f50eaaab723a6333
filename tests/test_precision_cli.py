"""The command line's loss scaling, clipping and recipe options print what the library measured.

`zerosim train --loss-scale dynamic|torch|deepspeed|S --scale-window N --clip-grad MAX_NORM --reduction R
--allreduce ring|nccl` and `zerosim replay --loss-scale S`: each printed number is checked against the
library's own run (the trainer's result, the oracle with the same recipe, the replay's numbers).
"""

import io
import json
import re
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

from zerosim import MLP, Reference, get_optimizer
from zerosim.cli.main import main
from zerosim.models import make_regression
from zerosim.precision import get_precision
from zerosim.train import TrainConfig, train


def run(*argv) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


TRAIN = [
    "train",
    "--steps",
    "6",
    "--print-every",
    "1",
    "--precision",
    "fp16-mixed",
    "--widths",
    "8,16,4",
    "--stage",
    "2",
]


def test_train_prints_the_scale_every_step_and_the_skipped_steps():
    code, out, _ = run(*TRAIN, "--loss-scale", "dynamic", "--scale-window", "2")
    assert code == 0
    policy = get_precision("fp16-mixed").with_(loss_scale="torch", loss_scale_options={"growth_interval": 2})
    result = train(TrainConfig(widths=(8, 16, 4), stage=2, precision=policy, steps=6))
    assert "dynamic loss scale (torch's GradScaler, from 65536)" in out.splitlines()[0]
    lines = [line for line in out.splitlines() if line.startswith("step ")]
    for step, (line, scale) in enumerate(zip(lines, result.scales), start=1):
        assert re.search(rf"loss \S+  scale {scale:g}(  skipped|$)", line), line
        assert ("skipped" in line) == (step in result.skipped), line
    assert result.skipped  # 2**16 overflows this MLP's first gradients
    want = (f"loss scale (torch's GradScaler): 65536 at step 1, {result.scales[-1]:g} at step 6; "
            f"skipped {len(result.skipped)} of 6 steps: {', '.join(map(str, result.skipped))}")
    assert want in out.splitlines()


def test_train_json_has_the_scales_skips_and_norms():
    code, out, _ = run(*TRAIN, "--json", "--loss-scale", "deepspeed", "--clip-grad", "0.05")
    assert code == 0
    got = json.loads(out)
    policy = get_precision("fp16-mixed").with_(loss_scale="deepspeed")
    result = train(TrainConfig(widths=(8, 16, 4), stage=2, precision=policy, steps=6, clip_grad=0.05))
    assert (got["losses"], got["scales"], got["skipped"], got["grad_norms"]) == (
        result.losses,
        result.scales,
        result.skipped,
        result.norms,
    )
    assert [n is None for n in got["grad_norms"]] == [s in result.skipped for s in range(1, 7)]  # no norm when skipped


def test_train_prints_the_clipped_norm():
    code, out, _ = run(*TRAIN, "--precision", "fp32", "--clip-grad", "0.1")
    result = train(TrainConfig(widths=(8, 16, 4), stage=2, precision="fp32", steps=6, clip_grad=0.1))
    assert code == 0 and "clip grad norm 0.1" in out.splitlines()[0]
    lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert [float(line.split("grad norm ")[1]) for line in lines] == result.norms


@pytest.mark.parametrize(
    "stage, recipe, allreduce", [(1, "deepspeed-zero12", None), (3, "fsdp2", None), (0, "ddp", "nccl")]
)
def test_train_with_a_recipe_gives_the_oracles_losses(stage, recipe, allreduce):
    n, steps, batch, widths, seed = 3, 3, 5, [6, 8, 3], 2
    args = ["train", "--json", "--stage", str(stage), "--ranks", str(n), "--steps", str(steps), "--batch", str(batch),
            "--widths", "6,8,3", "--seed", str(seed), "--precision", "fp16-mixed", "--reduction", recipe]
    code, out, _ = run(*args, *(["--allreduce", allreduce] if allreduce else []))
    assert code == 0
    model = MLP(widths)
    policy = get_precision("fp16-mixed").with_(reduction=recipe, allreduce=allreduce or "ring")
    ref = Reference(
        model,
        get_optimizer("adam", lr=1e-2),
        policy,
        world_size=n,
        params=model.init_params(np.random.default_rng(seed + 1)),
        reduce_every_micro_step=stage >= 2,
    )
    pool = make_regression(np.random.default_rng(seed), n * steps, batch, widths)
    want = [float(np.mean(ref.step(pool[s * n : (s + 1) * n]))) for s in range(steps)]
    assert json.loads(out)["losses"] == want


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("args, message", [
    (["--loss-scale", "fast"], "--loss-scale takes a number > 0 or one of torch, dynamic, deepspeed, got 'fast'"),
    (["--loss-scale", "-8"], "--loss-scale takes a number > 0 or one of torch, dynamic, deepspeed, got '-8'"),
    (["--scale-window", "5"], "--scale-window needs a dynamic --loss-scale"),
    (["--loss-scale", "torch", "--scale-window", "0"], "--scale-window must be at least 1, got 0"),
    (["--clip-grad", "-1"], "--clip-grad must be a finite number > 0"),
    (["--reduction", "ddp", "--stage", "2"], "reduction 'ddp' follows"),
])
def test_bad_precision_options_are_refused_with_the_reason(args, message):
    code, out, err = run("train", "--steps", "1", *args)
    assert code == 2 and message in err and not out


def test_replay_narrates_the_scaled_and_unscaled_gradients():
    code, out, _ = run("replay", "--loss-scale", "1024", "--json")
    assert code == 0
    (step,) = json.loads(out)["steps"]
    assert step["loss_scale"] == {"scale": 1024.0, "scaler": "static", "unscale": "reciprocal", "inverse": 2.0**-10,
                                  "found_inf": False, "skipped": False, "scale_after": 1024.0, "message": ""}
    g0, g1 = step["gpus"]
    # seed 004: local gradients [0, 0, 0, -4.5] and [-11, -5.5, -5.5, -5.5], each times 1024 in fp16 (exact)
    assert g0["local_grads"] == [0, 0, 0, -4.5 * 1024] and g1["local_grads"] == [
        -11 * 1024,
        -5.5 * 1024,
        -5.5 * 1024,
        -5.5 * 1024,
    ]
    # summed, still scaled
    assert g0["reduced_shard"] + g1["reduced_shard"] == [-11 * 1024, -5.5 * 1024, -5.5 * 1024, -10 * 1024]
    assert g0["averaged_shard"] + g1["averaged_shard"] == [-5.5, -2.75, -2.75, -5.0]  # / 2, x fl32(1/1024): the seed's
    _, text, _ = run("replay", "--loss-scale", "1024")
    assert (
        "multiplied by fl32(1/S) = 0.0009765625" in text
        and "GPU 1 reduced (still scaled, fp16): [-5632, -10240]" in text
    )


def test_replay_with_a_dynamic_scale_skips_the_overflowing_step():
    # 2**16 x 11 overflows fp16 (65504): torch's GradScaler skips steps while it halves S, 2**16 -> 2**15 -> 2**14 ->
    # 2**13
    # (11 x 2**13 = 90112 still overflows) -> 2**12 (45056 fits): the fifth step is the first update.
    code, out, _ = run("replay", "--loss-scale", "torch", "--steps", "5", "--json")
    assert code == 0
    steps = json.loads(out)["steps"]
    assert [s["loss_scale"]["skipped"] for s in steps] == [True] * 4 + [False]
    assert [s["loss_scale"]["scale"] for s in steps] == [2.0**16, 2.0**15, 2.0**14, 2.0**13, 2.0**12]
    assert steps[3]["gpus"][0]["master"] == [2.0, -3.0]  # nothing moved while skipping
    assert steps[4]["gpus"][0]["averaged_shard"] == [-5.5, -2.75]
    _, text, _ = run("replay", "--loss-scale", "torch", "--steps", "2")
    assert "torch's GradScaler skips the step: no master, m, v or weight changes" in text
    assert "S goes from 65536 to 32768 for the next step." in text
