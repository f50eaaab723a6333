"""`zerosim train --ds-config`: a DeepSpeed config's stage, precision, batch, accumulation, clipping, optimizer and
buckets run with the gradient recipe DeepSpeed runs at that stage; its "auto" values take the flags'; a flag that
contradicts it, and what train does not model, are refused naming the key."""

import argparse
import json

import pytest

from zerosim.cli import train_cmd
from zerosim.frameworks.deepspeed import sample_ds_config


def config(*words):
    p = argparse.ArgumentParser()
    train_cmd.add_arguments(p)
    return train_cmd.config_from_args(p.parse_args(list(words)))[0]


def write(tmp_path, body: dict) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, **body}))
    return str(path)


def test_the_hf_trainer_zero2_sample():
    # ds_config_zero2.json: fp16 with DeepSpeed's dynamic scaler (loss_scale 0, initial_scale_power 16), ZeRO-2 with
    # a 2e8 reduce bucket, 4 accumulation steps of micro-batches of 1, clipping 1.0, AdamW(lr 3e-5, weight_decay 0)
    c = config("--ds-config", str(sample_ds_config("zero2")))
    assert (c.stage, c.batch, c.accumulation_steps, c.clip_grad, c.optimizer, c.lr) == (2, 1, 4, 1.0, "adamw", 3e-5)
    assert c.precision.compute == "fp16" and c.precision.loss_scale == "deepspeed"
    assert c.precision.reduction == "deepspeed-zero12"  # stage_1_and_2.py's recipe, not the seeds'
    assert c.comm.reduce_bucket_size == 200_000_000
    assert c.optimizer_options == {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "formula": "deepspeed"}


def test_stage_3_runs_deepspeed_zero3_and_bf16_accumulating_in_fp32_at_stage_1_runs_bf16_optimizer(tmp_path):
    three = config("--ds-config", write(tmp_path, {"zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}))
    assert three.precision.reduction == "deepspeed-zero3"
    one = config("--ds-config", write(tmp_path, {"zero_optimization": {"stage": 1}, "bf16": {"enabled": True},
                                                 "data_types": {"grad_accum_dtype": "fp32"}}))
    assert one.precision.reduction == "deepspeed-bf16-optimizer" and one.precision.grad_accum == "fp32"


def test_auto_takes_the_flags(tmp_path):
    path = write(tmp_path, {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto",
                            "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
                            "optimizer": {"type": "Adam", "params": {"eps": 1e-6}}})
    c = config("--ds-config", path, "--batch", "3", "--accumulation-steps", "2", "--clip-grad", "0.5", "--lr", "0.1")
    assert (c.batch, c.accumulation_steps, c.clip_grad, c.lr) == (3, 2, 0.5, 0.1)
    assert c.optimizer_options == {"eps": 1e-6, "formula": "deepspeed"}


@pytest.mark.bad_input("DeepSpeed configs")
@pytest.mark.parametrize("body, flags, words", [
    ({"zero_optimization": {"stage": 2}}, ["--stage", "3"], "--stage 3 vs zero_optimization.stage 2"),
    ({"zero_optimization": {"stage": 2}, "gradient_clipping": 1.0}, ["--clip-grad", "2"],
     "--clip-grad 2 vs gradient_clipping 1.0"),
    ({"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": 0.1}}}, ["--lr", "0.2"],
     "--lr 0.2 vs optimizer.params.lr 0.1"),
    ({"zero_optimization": {"stage": 0}}, [], "zero_optimization.stage 0"),
    ({"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"torch_adam": True}}}, [],
     "optimizer.params.torch_adam is not read"),
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}, [], "offload"),
])
def test_what_train_cannot_run_is_refused(tmp_path, body, flags, words):
    with pytest.raises(ValueError) as e:
        config("--ds-config", write(tmp_path, body), *flags)
    assert words in str(e.value)


@pytest.mark.bad_input("DeepSpeed configs")
def test_with_resume_it_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--ds-config describes a new run"):
        config("--ds-config", write(tmp_path, {"zero_optimization": {"stage": 2}}), "--resume", str(tmp_path))
