"""Issue 35, item 7: every value of a DeepSpeed config is checked, naming the file and the key, and nothing is coerced
in silence. On main `fp16.loss_scale: -1` ran as the dynamic scaler; a bucket size of -1 was refused naming
`CommSchedule.reduce_bucket_size` (zerosim's field, not the file's key); `hysteresis: 0` named `hysteresis` without
the file; `allgather_bucket_size: -1`, `sub_group_size: -1`, `mics_shard_size: 0`, `gradient_predivide_factor: 0`,
`optimizer.params: [1, 2]` or `{"lr": "fast"}` were accepted; SGD's `momentum: "abc"` raised Python's own words.

Each row: the config (beside a micro-batch), the key the error must name, and words of its reason. The ranges are
DeepSpeed v0.19.5's own (frameworks/deepspeed/_keys.py LIMITS cites each)."""

import json

import pytest

from zerosim.frameworks.deepspeed import read_ds_config

FP16 = {"enabled": True}
Z3 = {"stage": 3}

CASES = [
    ({"fp16": {**FP16, "loss_scale": -1}}, "fp16.loss_scale", "0 enables dynamic loss scaling"),  # ran as dynamic
    ({"fp16": {**FP16, "loss_scale": 1e39}}, "fp16.loss_scale", "up to fp32's largest"),
    ({"fp16": {**FP16, "loss_scale_window": 0}}, "fp16.loss_scale_window", "must be > 0 with dynamic loss scaling"),
    ({"fp16": {**FP16, "min_loss_scale": 0}}, "fp16.min_loss_scale", "must be > 0 with dynamic loss scaling"),
    ({"fp16": {**FP16, "min_loss_scale": -3}}, "fp16.min_loss_scale", "DeepSpeed refuses it too"),
    ({"fp16": {**FP16, "hysteresis": 0}}, "fp16.hysteresis", "never does"),  # DeepSpeed would never back off
    ({"fp16": {**FP16, "initial_scale_power": 2000}}, "fp16.initial_scale_power", "0 to 127"),  # OverflowError
    ({"fp16": {**FP16, "initial_scale_power": -5}}, "fp16.initial_scale_power", "0 to 127"),
    ({"fp16": {**FP16, "initial_scale_power": 3, "min_loss_scale": 64}}, "fp16.initial_scale_power",
     "below fp16.min_loss_scale 64"),
    ({"zero_optimization": {**Z3, "reduce_bucket_size": -5}}, "zero_optimization.reduce_bucket_size", "ge=0"),
    ({"zero_optimization": {**Z3, "stage3_max_live_parameters": -1}}, "zero_optimization.stage3_max_live_parameters",
     "ge=0"),
    ({"zero_optimization": {**Z3, "stage3_prefetch_bucket_size": -1}},
     "zero_optimization.stage3_prefetch_bucket_size", "ge=0"),
    ({"zero_optimization": {**Z3, "stage3_max_reuse_distance": -1}}, "zero_optimization.stage3_max_reuse_distance",
     "ge=0"),
    ({"zero_optimization": {"stage": 2, "allgather_bucket_size": -1}}, "zero_optimization.allgather_bucket_size",
     "ge=0"),
    ({"zero_optimization": {**Z3, "sub_group_size": -1}}, "zero_optimization.sub_group_size", "ge=0"),
    ({"zero_optimization": {**Z3, "zero_hpz_partition_size": -2}}, "zero_optimization.zero_hpz_partition_size",
     "ge=0"),
    ({"zero_optimization": {**Z3, "stage3_param_persistence_threshold": -2}},
     "zero_optimization.stage3_param_persistence_threshold", "ge=0"),
    ({"zero_optimization": {**Z3, "mics_shard_size": 0}}, "zero_optimization.mics_shard_size", "-1 (off)"),
    ({"gradient_predivide_factor": 0}, "gradient_predivide_factor", "> 0"),
    ({"steps_per_print": 0}, "steps_per_print", "global_steps % steps_per_print"),
    ({"optimizer": {"type": "SGD", "params": {"momentum": "abc"}}}, "optimizer.params.momentum", "a number >= 0"),
    ({"optimizer": {"type": "Adam", "params": [1, 2]}}, "optimizer.params", "must be an object"),
    ({"optimizer": {"type": "Adam", "params": {"lr": "fast"}}}, "optimizer.params.lr", "a number >= 0"),
    ({"optimizer": {"type": "Adam", "params": {"lr": -1}}}, "optimizer.params.lr", "a number >= 0"),
    ({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.5]}}}, "optimizer.params.betas", "[0, 1)"),
    ({"optimizer": {"type": "AdamW", "params": {"eps": -1e-8}}}, "optimizer.params.eps", "a number >= 0"),
]


@pytest.mark.bad_input("DeepSpeed configs", unchanged=True)
@pytest.mark.parametrize("config, key, why", CASES, ids=[c[1] + "=" + json.dumps(c[0])[-24:] for c in CASES])
def test_every_value_is_checked_naming_the_file_and_the_key(config, key, why, tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, **config}))
    before = path.read_bytes()
    with pytest.raises(ValueError) as e:
        read_ds_config(str(path), 8, 64)
    message = str(e.value)
    assert message.startswith(f"{path}: {key} ") and why in message, message
    assert "\n" not in message and "CommSchedule" not in message and "init_scale" not in message
    assert path.read_bytes() == before


def test_a_zero_deepspeed_accepts_is_run_as_it_runs_and_the_report_says_so():
    run = read_ds_config({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        **Z3, "reduce_bucket_size": 0, "stage3_max_live_parameters": 0, "stage3_prefetch_bucket_size": 0}}, 8, 64)
    notes = {k.key: k.note for k in run.keys}
    # DeepSpeed sends a parameter larger than the bucket on its own: a bucket of 0 sends every one alone
    assert run.comm.reduce_bucket_size == 1 and "reduced on its own" in notes["zero_optimization.reduce_bucket_size"]
    assert run.comm.max_live_parameters == 1 and "nothing is prefetched" in notes[
        "zero_optimization.stage3_max_live_parameters"]
    assert run.comm.prefetch_bucket_size is None  # 0 stops prefetching, in DeepSpeed and here


def test_memory_prints_what_a_zero_became(tmp_path, capsys):
    from zerosim.cli.main import main

    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        **Z3, "reduce_bucket_size": 0}}))
    assert main(["memory", "--model", "gpt2-small", "--ranks", "8", "--ds-config", str(path)]) == 0
    assert "zero_optimization.reduce_bucket_size: 0: every parameter's gradient is reduced on its own" in " ".join(
        capsys.readouterr().out.split())


def test_a_static_scale_and_the_defaults_still_read():
    assert read_ds_config({"train_micro_batch_size_per_gpu": 1, "fp16": {**FP16, "loss_scale": 128}}, 8,
                          64).precision.loss_scale == 128
    assert read_ds_config({"train_micro_batch_size_per_gpu": 1, "fp16": FP16}, 8, 64).precision.loss_scale \
        == "deepspeed"
