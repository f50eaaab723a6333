"""A DeepSpeed config as input: each modelled key changes exactly what it says and nothing else (a test per key),
the HF Trainer's "auto" is filled as the Trainer fills it, every key of the file is reported, and wrong types,
unknown stages or keys, offload and contradictions are refused with the key named."""

import io
import json
from contextlib import redirect_stdout
from dataclasses import fields

import pytest

from zerosim.cli.main import main
from zerosim.frameworks.deepspeed import TrainerArgs, read_ds_config, sample_ds_config
from zerosim.parallel.data import CommSchedule
from zerosim.precision import MixedPrecision

N, HIDDEN = 8, 64
BASE = {  # a stage-2 config with every modelled key at a value of its own (DeepSpeed's defaults where it can)
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 3,
    "gradient_clipping": 1.0,
    "fp16": {
        "enabled": True,
        "loss_scale": 0,
        "initial_scale_power": 16,
        "loss_scale_window": 1000,
        "hysteresis": 2,
        "consecutive_hysteresis": False,
        "min_loss_scale": 1,
    },
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    "zero_optimization": {
        "stage": 2,
        "contiguous_gradients": True,
        "reduce_scatter": True,
        "reduce_bucket_size": 5e8,
        "allgather_partitions": True,
        "allgather_bucket_size": 5e8,
        "overlap_comm": False,
        "stage3_prefetch_bucket_size": 5e7,
        "stage3_max_live_parameters": 1e9,
        "stage3_max_reuse_distance": 1e9,
    },
}


STAGE3 = {**BASE, "zero_optimization": {**BASE["zero_optimization"], "stage": 3}}


def flat(run) -> dict:
    """Every field a DeepSpeedRun sets, its parts spelled out ("comm.reduce_bucket_size", "precision.loss_scale")."""
    out = {}
    for f in fields(run):
        v = getattr(run, f.name)
        if f.name == "keys":
            continue
        if isinstance(v, (CommSchedule, MixedPrecision)) or f.name == "buckets":
            out |= {f"{f.name}.{g.name}": getattr(v, g.name) for g in fields(v)}
        else:
            out[f.name] = v
    return out


def changed(path: str, value, base=BASE) -> dict:
    """{field: (base value, new value)} for the fields that differ when `path` (dotted) is set to `value`."""
    config = json.loads(json.dumps(base))
    node, *rest = path.split(".")
    target = config
    while rest:
        target = target.setdefault(node, {})
        node, *rest = rest
    target[node] = value
    base, new = flat(read_ds_config(base, N, HIDDEN)), flat(read_ds_config(config, N, HIDDEN))
    return {k: (base[k], new[k]) for k in base if base[k] != new[k]}


DYNAMIC = dict(
    (
        ("init_scale", 65536.0),
        ("scale_window", 1000),
        ("hysteresis", 2),
        ("min_scale", 1.0),
        ("consecutive_hysteresis", False),
    )
)


def scaler(**changes):
    return tuple(sorted({**DYNAMIC, **changes}.items()))


MODELLED = [
    # (key, new value, the fields it changes: exactly these, to exactly this)
    ("zero_optimization.stage", 3, {"stage": 3}),  # overlap_comm given (false): the stage changes nothing else
    (
        "zero_optimization.contiguous_gradients",
        False,
        {"buckets.contiguous_gradients": False},
    ),  # the bucket buffer's row
    ("zero_optimization.reduce_scatter", True, {}),  # what zerosim does already: no change (false: not modelled)
    (
        "zero_optimization.reduce_bucket_size",
        2e8,
        {"comm.reduce_bucket_size": 200_000_000, "buckets.reduce_bucket_size": 200_000_000},
    ),
    ("zero_optimization.allgather_partitions", True, {}),  # zerosim all-gathers; false is listed as not modelled
    ("zero_optimization.allgather_bucket_size", 2e8, {}),  # ignored, as DeepSpeed ignores it with current torch
    ("zero_optimization.overlap_comm", True, {"comm.overlap_comm": True, "buckets.overlap_comm": True}),
    ("zero_optimization.stage3_prefetch_bucket_size", 1e6, {"comm.prefetch_bucket_size": 1_000_000}),
    ("zero_optimization.stage3_max_live_parameters", 3e8, {"comm.max_live_parameters": 300_000_000}),
    ("zero_optimization.stage3_max_reuse_distance", 0, {"comm.max_reuse_distance": 0}),
    (
        "fp16.enabled",
        False,
        {
            "precision.compute": "fp32",
            "precision.master": None,
            "precision.loss_scale": 1.0,
            "precision.loss_scale_options": (),
            "precision_name": "fp32",
            "buckets.element_bytes": 4,
        },
    ),
    ("fp16.loss_scale", 128, {"precision.loss_scale": 128.0, "precision.loss_scale_options": ()}),  # a static S
    ("fp16.initial_scale_power", 12, {"precision.loss_scale_options": scaler(init_scale=4096.0)}),
    ("fp16.loss_scale_window", 500, {"precision.loss_scale_options": scaler(scale_window=500)}),
    ("fp16.hysteresis", 4, {"precision.loss_scale_options": scaler(hysteresis=4)}),
    ("fp16.consecutive_hysteresis", True, {"precision.loss_scale_options": scaler(consecutive_hysteresis=True)}),
    ("fp16.min_loss_scale", 8, {"precision.loss_scale_options": scaler(min_scale=8.0)}),
    ("train_micro_batch_size_per_gpu", 4, {"micro_batch": 4, "train_batch_size": 4 * 3 * N}),
    ("gradient_accumulation_steps", 5, {"accumulation_steps": 5, "train_batch_size": 2 * 5 * N}),
    ("train_batch_size", 2 * 3 * N, {}),  # the product it must equal: accepted, nothing changes
    ("gradient_clipping", 0.5, {"clip_grad": 0.5}),
    ("communication_data_type", "fp32", {"precision.reduce": "fp32"}),
    ("data_types.grad_accum_dtype", "fp32", {"precision.grad_accum": "fp32"}),
    ("optimizer.type", "Lion", {"optimizer": "lion"}),
]


@pytest.mark.parametrize("key, value, effect", MODELLED, ids=[r[0] for r in MODELLED])
def test_each_modelled_key_changes_exactly_what_it_says(key, value, effect):
    # the stage3_* keys are read at stage 3 only (at stage 2 they are reported "no effect"): test them there
    base = STAGE3 if key.startswith("zero_optimization.stage3_") else BASE
    got = changed(key, value, base)
    assert {k: new for k, (_, new) in got.items()} == effect
    statuses = {k.key: k.status for k in read_ds_config(base, N, HIDDEN).keys}
    assert statuses.get(key, "modelled") == "modelled"


def test_bf16_enabled_switches_the_formats():
    config = {**BASE, "fp16": {"enabled": False}, "bf16": {"enabled": True}}
    run = read_ds_config(config, N, HIDDEN)
    assert (run.precision.compute, run.precision.master, run.precision.loss_scale, run.precision_name) == (
        "bf16",
        "fp32",
        1.0,
        "bf16-mixed",
    )


def test_every_key_of_the_file_is_reported_with_a_status():
    run = read_ds_config(sample_ds_config("zero2"), N, HIDDEN)
    raw = json.loads(sample_ds_config("zero2").read_text())
    dotted = {
        f"{k}.{s}" if isinstance(v, dict) and k != "optimizer" else k
        for k, v in raw.items()
        for s in (v if isinstance(v, dict) and k != "optimizer" else [None])
    }
    dotted = (
        {d.replace(".None", "") for d in dotted} - {"optimizer"}
        | {"optimizer.type"}
        | {f"optimizer.params.{p}" for p in raw["optimizer"]["params"]}
    )
    assert {k.key for k in run.keys} == dotted
    assert all(k.status in ("modelled", "no effect", "not modelled") for k in run.keys)


def test_deepspeed_defaults_where_the_file_is_silent():
    # DeepSpeedZeroConfig: overlap_comm None -> True at stage 3 only; reduce_bucket_size 5e8; runtime/constants.py:
    # GRADIENT_CLIPPING_DEFAULT 1.0; no optimizer block: the HF Trainer's AdamW
    for stage, overlap in ((2, False), (3, True)):
        run = read_ds_config({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": stage}}, N)
        assert (run.comm.overlap_comm, run.comm.reduce_bucket_size, run.clip_grad, run.optimizer) == (
            overlap,
            500_000_000,
            1.0,
            "adamw",
        )
    assert read_ds_config({"train_micro_batch_size_per_gpu": 1}, N).stage == 0


def test_batch_sizes_follow_deepspeed_s_rules():
    # _set_batch_related_parameters: the missing one of the three comes from the other two
    assert read_ds_config({"train_batch_size": 48, "train_micro_batch_size_per_gpu": 2}, N).accumulation_steps == 3
    assert read_ds_config({"train_batch_size": 48, "gradient_accumulation_steps": 3}, N).micro_batch == 2
    only = read_ds_config({"train_batch_size": 16}, N)
    assert (only.micro_batch, only.accumulation_steps) == (2, 1)


def test_auto_is_filled_as_the_hf_trainer_fills_it():
    # integrations/deepspeed.py: trainer_config_process and trainer_config_finalize
    run = read_ds_config(
        sample_ds_config("zero3"), N, hidden_size=4096, trainer=TrainerArgs(per_device_train_batch_size=2, bf16=True)
    )
    notes = {k.key: k.note for k in run.keys}
    assert run.comm.reduce_bucket_size == 4096 * 4096  # hidden_size²
    assert run.comm.prefetch_bucket_size == int(0.9 * 4096 * 4096)  # 0.9·hidden_size²
    assert "40960 (10·hidden_size)" in notes["zero_optimization.stage3_param_persistence_threshold"]
    assert (run.micro_batch, run.accumulation_steps, run.train_batch_size, run.clip_grad) == (2, 1, 16, 1.0)
    assert run.precision_name == "bf16-mixed"
    assert "TrainingArguments' default" in notes["gradient_accumulation_steps"]  # not given: the Trainer's 1
    default = read_ds_config(sample_ds_config("zero3"), N, hidden_size=4096)  # no flags: TrainingArguments' defaults
    assert (default.micro_batch, default.precision_name) == (8, "fp32")


@pytest.mark.bad_input("DeepSpeed configs")
@pytest.mark.parametrize(
    "config, match",
    [
        ({"zero_optimization": {"stage": 4}}, "zero_optimization.stage must be 0, 1, 2 or 3, got 4"),
        ({"zero_optimization": {"stage": "3"}}, "zero_optimization.stage must be a whole number, got '3'"),
        ({"zero_optimization": {"stage": 2.5}}, "zero_optimization.stage must be a whole number, got 2.5"),
        ({"zero_optimization": {"overlap_comm": "yes"}}, "zero_optimization.overlap_comm must be true or false"),
        ({"zero_optimization": {"reduce_bucket_size": "big"}}, 'reduce_bucket_size must be a whole number or "auto"'),
        (
            {"zero_optimization": {"stage": 3, "stage_3_prefetch": 1}},
            "zero_optimization.stage_3_prefetch is not a DeepSpeed",
        ),
        ({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}},
         "zero_optimization.offload_optimizer: .* not 0: it offloads through its ZeRO optimizers"),
        ({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nvme"}}},
         "zero_optimization.offload_param: offload_param without offload_optimizer is not modelled"),
        ({"zero_optimization": {"stage": 2, "cpu_offload": True, "offload_optimizer": {"device": "cpu"}}},
         "Cannot provide deprecated parameter 'cpu_offload' and replacing parameter 'offload_optimizer' together"),
        ({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, "fp16 and bf16 are both enabled"),
        ({"fp16": {"enabled": True, "scale": 2}}, "fp16.scale is not a DeepSpeed fp16 key"),
        (
            {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True}},
            "bf16_master_weights_and_grads .* not modelled",
        ),
        (
            {"train_batch_size": 50, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3},
            "train_batch_size 50 is not train_micro_batch_size_per_gpu 2 × gradient_accumulation_steps 3 × 8 ranks "
            "= 48",
        ),
        ({"gradient_accumulation_steps": 2}, "give train_batch_size or train_micro_batch_size_per_gpu"),
        ({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": -1}, "gradient_clipping must be >= 0"),
        (
            {"train_micro_batch_size_per_gpu": 1, "communication_data_type": "fp8"},
            "communication_data_type must be fp32",
        ),
        (
            {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Adafactor"}},
            "optimizer type 'Adafactor' is not one",
        ),
        (
            {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}},
            "fills from the model's hidden_size",
        ),
        ([1, 2], "one JSON object"),
    ],
)
def test_bad_configs_are_refused_naming_the_key(config, match):
    with pytest.raises(ValueError, match=match):
        read_ds_config(config, N)


def _zero(**zero):
    return {"train_micro_batch_size_per_gpu": 1, "zero_optimization": zero}


@pytest.mark.bad_input("DeepSpeed configs")
@pytest.mark.parametrize("offload, match", [
    # every value of DeepSpeed 0.19.8's DeepSpeedZeroOffloadOptimizerConfig / ...ParamConfig checked, key named
    ({"offload_optimizer": {"device": "gpu"}}, "offload_optimizer.device must be one of none, cpu, nvme"),
    ({"offload_optimizer": {"device": "CPU"}}, "offload_optimizer.device must be one of none, cpu, nvme"),
    ({"offload_optimizer": {"device": 1}}, "offload_optimizer.device must be a string"),
    ({"offload_optimizer": "cpu"}, "zero_optimization.offload_optimizer must be an object"),
    ({"offload_optimizer": {"device": "cpu", "colour": 1}},
     "offload_optimizer.colour is not a DeepSpeed offload_optimizer key"),
    ({"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu", "max_in_gpu": 1}},
     "offload_param.max_in_gpu is not a DeepSpeed offload_param key"),
    ({"offload_optimizer": {"device": "nvme"}}, "offload_optimizer.device is nvme with no nvme_path"),
    ({"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "nvme"}},
     "offload_param.device is nvme with no nvme_path"),
    ({"offload_optimizer": {"device": "cpu", "ratio": 0.5}}, "offload_optimizer.ratio 0.5 .* is not modelled"),
    ({"offload_optimizer": {"device": "cpu", "ratio": 1.5}}, "offload_optimizer.ratio must be between 0 and 1"),
    ({"offload_optimizer": {"device": "cpu", "super_offload": True}},
     "offload_optimizer.super_offload true .* is not modelled"),
    ({"offload_optimizer": {"device": "cpu", "cpuadam_cores_perc": -0.1}},
     "offload_optimizer.cpuadam_cores_perc must be between 0 and 1"),
    ({"offload_optimizer": {"device": "cpu", "buffer_count": -1}}, "offload_optimizer.buffer_count must be at least 0"),
    ({"offload_optimizer": {"device": "cpu", "pin_memory": "yes"}}, "offload_optimizer.pin_memory must be true or"),
    ({"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu", "buffer_size": 1.5}},
     "offload_param.buffer_size must be a whole number"),
    ({"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu", "max_in_cpu": -1}},
     "offload_param.max_in_cpu must be at least 0"),
    ({"offload_optimizer": {"device": "cpu", "nvme_path": 5}}, "offload_optimizer.nvme_path must be a string"),
    ({"cpu_offload": "yes"}, "zero_optimization.cpu_offload must be true or false"),
])
def test_every_offload_value_is_checked_naming_file_and_key(offload, match):
    with pytest.raises(ValueError, match=f"the DeepSpeed config: .*{match}"):
        read_ds_config(_zero(stage=3, **offload), N)


OFFLOADS = [  # (stage, zero_optimization's offload keys) -> the placement DeepSpeed 0.19.8 runs, a note's words
    (1, {"offload_optimizer": {"device": "cpu"}}, "optimizer-cpu", None),
    (2, {"offload_optimizer": {"device": "cpu", "pin_memory": True}}, "optimizer-cpu", None),
    (2, {"offload_optimizer": {"device": "nvme"}}, "optimizer-cpu", "cpu_offload = True"),  # no nvme_path: unread
    (2, {"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}, "optimizer-cpu",
     "reads offload_param at stage 3 only"),
    (3, {"offload_optimizer": {"device": "cpu"}}, "optimizer-cpu", None),
    (3, {"offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}}, "optimizer-nvme", None),
    (3, {"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}, "params-cpu", None),
    (3, {"offload_optimizer": {"device": "nvme", "nvme_path": "/nvme", "pipeline_read": True},
         "offload_param": {"device": "nvme", "nvme_path": "/nvme", "max_in_cpu": 0}}, "params-nvme", None),
    (3, {"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "nvme", "nvme_path": "/n"}},
     "params-nvme-optimizer-cpu", None),
    (2, {"cpu_offload": True}, "optimizer-cpu", None),  # deprecated, read as offload_optimizer {device: cpu}
    (3, {"cpu_offload": True, "cpu_offload_param": True}, "params-cpu", None),
    (3, {"offload_optimizer": None}, None, None),  # Optional: null is no offload
    (3, {"offload_optimizer": {"device": "none", "pin_memory": False}}, None, None),
    (2, {"cpu_offload": False}, None, None),
]


@pytest.mark.parametrize("stage, offload, placement, note", OFFLOADS)
def test_offload_keys_become_the_placement_deepspeed_runs(stage, offload, placement, note):
    run = read_ds_config(_zero(stage=stage, **offload), N)
    assert (run.offload.name if run.offload else None) == placement
    keys = {k.key: k for k in run.keys}
    if note:
        assert any(note in k.note for k in run.keys if "offload" in k.key), [k.note for k in run.keys]
    for key, value in offload.items():
        for sub in value if isinstance(value, dict) else ():  # every key of the objects is reported, with a status
            assert f"zero_optimization.{key}.{sub}" in keys, sub
    statuses = {k.key.split(".")[-1]: k.status for k in run.keys if "offload" in k.key}
    assert set(statuses.values()) <= {"modelled", "not modelled", "no effect"}
    if placement is None:
        assert all(v == "no effect" for v in statuses.values())


def test_unpinned_offload_is_said_to_be_not_modelled():
    run = read_ds_config(_zero(stage=2, offload_optimizer={"device": "cpu", "pin_memory": False}), N)
    k = {k.key: k for k in run.keys}["zero_optimization.offload_optimizer.pin_memory"]
    assert k.status == "not modelled" and "pageable" in k.note


@pytest.mark.bad_input("DeepSpeed configs")
def test_offload_to_nowhere_is_no_offload():
    run = read_ds_config(
        {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "none"}},
        },
        N,
    )
    assert {k.key: k.status for k in run.keys}["zero_optimization.offload_optimizer.device"] == "no effect"
    assert run.offload is None


# -- through `zerosim memory --ds-config` ----------------------------------------------------------------


def memory(tmp_path, config, *flags):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config))
    out = io.StringIO()
    with redirect_stdout(out):
        assert (
            main(
                [
                    "memory",
                    "--model",
                    "llama-2-7b",
                    "--ranks",
                    "8",
                    "--seq-len",
                    "512",
                    "--gpu",
                    "a100-80gb",
                    "--ds-config",
                    str(path),
                    "--json",
                    *flags,
                ]
            )
            == 0
        )
    return json.loads(out.getvalue())


def estimate(r, name):
    return next((o["bytes"] for o in r["gpu"]["by_stage"][0]["overheads"] if o["name"] == name), 0)


def test_memory_runs_the_config_s_stage_batch_and_buckets(tmp_path):
    base = {
        "train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2, "overlap_comm": False, "reduce_bucket_size": 1e8},
    }
    r = memory(tmp_path, base)
    assert [s["stage"] for s in r["stages"]] == [2] and r["precision"] == "bf16-mixed"
    assert estimate(r, "DeepSpeed gradient buckets") == 1e8 * 2  # one bf16 bucket (stage_1_and_2.py: buf_0)
    two = memory(tmp_path, {**base, "train_micro_batch_size_per_gpu": 2})
    assert two["stages"][0]["activations"] == 2 * r["stages"][0]["activations"]  # every activation grows with B
    assert two["stages"][0]["resting"] == r["stages"][0]["resting"]  # the model states do not
    overlap = memory(tmp_path, {**base, "zero_optimization": {**base["zero_optimization"], "overlap_comm": True}})
    assert estimate(overlap, "DeepSpeed gradient buckets") == 2 * 1e8 * 2  # buf_1 too, "when overlap_comm is enabled"
    off = memory(tmp_path, {**base, "zero_optimization": {**base["zero_optimization"], "contiguous_gradients": False}})
    assert estimate(off, "DeepSpeed gradient buckets") == 0
    three = memory(tmp_path, {**base, "zero_optimization": {**base["zero_optimization"], "stage": 3}})
    assert three["stages"][0]["resting"]["params"] == r["stages"][0]["resting"]["params"] / 8  # ZeRO-3 shards W
    lion = memory(tmp_path, {**base, "optimizer": {"type": "Lion"}})
    assert "optim:v" not in lion["stages"][0]["resting"] and lion["optimizer"] == "lion"
    fp32 = memory(tmp_path, {**base, "data_types": {"grad_accum_dtype": "fp32"}})
    assert fp32["stages"][0]["resting"]["grads"] == 2 * r["stages"][0]["resting"]["grads"]  # fp32 gradient shard


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize(
    "flags, message",
    [
        (("--precision", "fp16-mixed"), "--precision fp16-mixed vs the config's bf16-mixed"),
        (("--batch", "4"), "--batch 4 vs train_micro_batch_size_per_gpu 1"),
        (("--comm", "fsdp"), "--comm and --ds-config both set the schedule"),
        (("--overlap-comm", "on"), "--overlap-comm and --ds-config both set the schedule"),
        (("--no-overlap",), "--overlap-comm and --ds-config both set the schedule"),  # its shorthand
    ],
)
def test_flags_that_contradict_the_config_are_refused(tmp_path, capsys, flags, message):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}}))
    assert main(["memory", "--model", "llama-2-7b", "--seq-len", "8", "--ds-config", str(path), *flags]) == 2
    assert message in capsys.readouterr().err
