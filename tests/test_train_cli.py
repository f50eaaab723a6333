"""`zerosim train` end to end: its losses are the oracle's on the same micro-batches, gradient accumulation included.

The command draws rank r's k-th micro-batch of step t from a fixed pool of teacher-made micro-batches
(index ((t-1)·N·K + r·K + k) mod pool size, pool = N·K·min(steps, 32)); the oracle below is fed the
same micro-batches in the same order, without the engine, the ring or the trainer.
"""

import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest

from zerosim import MLP, Reference, get_optimizer
from zerosim.cli.main import main
from zerosim.models import make_regression
from zerosim.precision import get_precision


def cli_losses(*args):
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["train", "--json", *args]) == 0
    return json.loads(out.getvalue())


@pytest.mark.parametrize(
    "stage, k, grad_accum", [(1, 1, "compute"), (1, 3, "compute"), (2, 3, "compute"), (3, 2, "fp32"), (0, 2, "fp32")]
)
def test_train_losses_are_the_oracles(stage, k, grad_accum):
    n, steps, batch, widths, seed, lr = 3, 4, 5, [6, 8, 3], 2, 1e-2
    got = cli_losses("--stage", str(stage), "--ranks", str(n), "--steps", str(steps), "--batch", str(batch),
                     "--widths", ",".join(map(str, widths)), "--seed", str(seed), "--lr", str(lr),
                     "--accumulation-steps", str(k), "--grad-accum", grad_accum)
    model = MLP(widths)
    policy = get_precision("bf16-mixed").with_(grad_accum="fp32" if grad_accum == "fp32" else None)
    ref = Reference(
        model,
        get_optimizer("adam", lr=lr),
        policy,
        world_size=n,
        params=model.init_params(np.random.default_rng(seed + 1)),
        accumulation_steps=k,
        reduce_every_micro_step=stage >= 2,
    )
    pool = make_regression(np.random.default_rng(seed), n * k * min(steps, 32), batch, widths)
    want = []
    for t in range(steps):
        base = t * n * k % len(pool)
        want.append(float(np.mean(ref.step([[pool[base + r * k + j] for j in range(k)] for r in range(n)]))))
    assert got["losses"] == want
    assert len(got["ranks"]) == n and all(r["bytes_sent"] > 0 for r in got["ranks"])


def test_json_output_is_only_json():
    out = cli_losses("--steps", "2")  # json.loads of the whole stdout: no header before it
    assert len(out["losses"]) == 2


def test_train_draws_a_bar_where_asked_and_nothing_where_no_one_watches(monkeypatch, capsys):
    # zerosim.train's own bar (a learner's notebook cell): on where asked, off under pytest (stderr a pipe, no kernel)
    import zerosim.progress
    from zerosim.train import TrainConfig, train

    monkeypatch.setattr(zerosim.progress, "DELAY", 0)  # at once: whether it shows must not hang on the machine's speed
    config = TrainConfig(steps=3, ranks=2)
    quiet = train(config)
    assert capsys.readouterr().err == ""
    shown = train(config, show_progress=True)
    err = capsys.readouterr().err
    assert "training" in err and "0/3 [" in err and "step/s" in err, err  # drawn, of 3 steps (then cleared)
    assert shown.losses == quiet.losses  # the bar changes nothing of the run
    assert train(config, show_progress=False).losses == quiet.losses and capsys.readouterr().err == ""


def test_zerosim_train_on_a_terminal_draws_one_bar_its_own():
    # `zerosim train` draws its bar with the losses and tells zerosim.train to draw none: a second bar would sit on a
    # line of its own, tqdm moving the cursor up to it ("\x1b[A") at every step
    from test_cli_exits import ZEROSIM, _run_with_terminal_stderr

    code, terminal = _run_with_terminal_stderr([*ZEROSIM, "train", "--steps", "3"])
    assert code == 0 and "3/3" in terminal and "loss=" in terminal, terminal
    assert "\x1b[A" not in terminal, terminal


def test_zerosim_diff_json_on_a_terminal_draws_no_bar():
    # --json is for machines: no bar even on a terminal (tests/test_cli_exits.py holds `memory` to it); diff's two runs
    # are zerosim.train's, told to draw none
    from test_cli_exits import ZEROSIM, _run_with_terminal_stderr

    argv = ["diff", "--a", "--stage 2", "--b", "--stage 3", "--steps", "2", "--json"]
    code, terminal = _run_with_terminal_stderr([*ZEROSIM, *argv])
    assert code == 0 and terminal == "", terminal


def test_a_saving_run_says_where_its_checkpoints_went(tmp_path, monkeypatch):
    """`--save` names every tag folder it wrote (read back from the disk: the folders a checkpoint's manifest is in),
    the latest last, and the command that reads them; --json lists the same folders."""
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["train", "--steps", "4", "--save", "my ckpt", "--save-every", "2"]) == 0
    on_disk = sorted(p.parent.name for p in (tmp_path / "my ckpt").glob("*/manifest.json"))
    assert on_disk == ["step000002", "step000004"]
    assert out.getvalue().splitlines()[-2:] == [
        "saved 2 checkpoints into 'my ckpt': step000002, step000004 (the latest); --resume 'my ckpt' continues the run",
        "  zerosim checkpoint inspect 'my ckpt'"]
    got = cli_losses("--steps", "6", "--resume", "my ckpt", "--save", "my ckpt", "--save-every", "1")
    assert got["saved"] == [f"my ckpt/step00000{k}" for k in (5, 6)]
    assert (tmp_path / "my ckpt" / "step000006" / "manifest.json").is_file()
