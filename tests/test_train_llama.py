"""`zerosim train --model llama` beside `--model gpt`: the command's losses are the oracle's on the same micro-batches,
and a short run learns the copy task far above chance."""

import io
import json
import math
from contextlib import redirect_stdout

import numpy as np
import pytest

from zerosim import Reference, get_optimizer
from zerosim.cli.main import main
from zerosim.models import Llama, make_sequence_task


def cli(*args):
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["train", "--model", "llama", "--json", *args]) == 0
    return json.loads(out.getvalue())


@pytest.mark.parametrize(
    "stage, task, extra",
    [(0, "copy", ()), (2, "sort", ("--checkpoint",)), (3, "reverse", ("--attention", "flash", "--kv-heads", "1"))],
)
def test_llama_losses_are_the_oracles(stage, task, extra):
    n, steps, batch, seed, lr = 3, 3, 4, 5, 1e-2
    got = cli(
        "--stage",
        str(stage),
        "--ranks",
        str(n),
        "--steps",
        str(steps),
        "--batch",
        str(batch),
        "--seed",
        str(seed),
        "--lr",
        str(lr),
        "--task",
        task,
        "--vocab",
        "7",
        "--length",
        "2",
        "--d-model",
        "8",
        "--heads",
        "2",
        *extra,
    )
    # the trainer's Llama: rotary base 100 for these 4-token sequences (zerosim/train/_trainer.py, build_model)
    model = Llama(
        7,
        8,
        2,
        1,
        4,
        n_kv_heads=1 if "--kv-heads" in extra else None,
        rope_theta=100.0,
        attention="flash" if "flash" in extra else "standard",
        checkpoint="block" if "--checkpoint" in extra else "none",
    )
    ref = Reference(
        model,
        get_optimizer("adam", lr=lr),
        "bf16-mixed",
        world_size=n,
        params=model.init_params(np.random.default_rng(seed + 1)),
    )
    pool = make_sequence_task(np.random.default_rng(seed), n * min(steps, 32), batch, 2, 7, task)  # the trainer's pool
    want = [float(np.mean(ref.step([pool[(t * n + r) % len(pool)] for r in range(n)]))) for t in range(steps)]
    assert got["losses"] == want


def test_a_short_run_learns_the_copy_task_beside_the_gpt():
    # The GPT's defaults (V = 6, strings of 3, d = 16, 1 block, bf16-mixed, lr 1e-2); 4 query heads over 2 KV heads
    got = cli("--stage", "3", "--ranks", "2", "--steps", "60", "--print-every", "20", "--heads", "4", "--kv-heads", "2")
    losses, accuracy = got["losses"], dict(got["accuracy"])
    assert abs(losses[0] - math.log(6)) < 0.05  # near-uniform predictions at the init
    assert np.mean(losses[-5:]) < 1.0 < losses[0]  # below the 1.35 plateau of a model that only places the separator
    # 256 held-out strings, 768 answer tokens: chance is 1/5 (±0.05 at three standard errors); 0.9 is 4.5 times it
    assert accuracy[1] < 0.3 and accuracy[60] > 0.9


def test_the_text_output_names_the_llama():
    out = io.StringIO()
    with redirect_stdout(out):
        assert (
            main(["train", "--model", "llama", "--steps", "2", "--ranks", "2", "--heads", "4", "--kv-heads", "2"]) == 0
        )
    assert (
        "zerosim train: Llama(vocab=6, d_model=16, heads=4, kv_heads=2, layers=1) (3,312 params), copy"
        in out.getvalue()
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--model", "llama", "--kv-heads", "3"), "must split evenly over n_kv_heads = 3"),
        (("--model", "llama", "--heads", "3"), "does not split into n_heads = 3 heads"),
        (("--model", "llama", "--widths", "4,8,2"), "--widths sizes the MLP; the Llama's shape"),
    ],
)
@pytest.mark.bad_input("command line")
def test_bad_llama_flags_are_clear_errors(capsys, argv, message):
    assert main(["train", "--steps", "1", *argv]) == 2
    assert message in capsys.readouterr().err
