"""DeepSpeed's config keys as data: each key's JSON type and default, and what zerosim does with it.

Sources, DeepSpeed v0.19.5 (deepspeedai/DeepSpeed): `DeepSpeedZeroConfig` (deepspeed/runtime/zero/config.py: the
fields, their aliases "stage3_*", defaults, and `extra="forbid"` from runtime/config_utils.py
`DeepSpeedConfigModel`: an unknown key inside zero_optimization, fp16 or bf16 is an error there too),
`DeepSpeedFP16Config` / `DeepSpeedBF16Config` (runtime/precision_config.py), and the top-level getters of
runtime/config.py with their defaults in runtime/constants.py.

Statuses: "modelled" (it sets what zerosim runs or estimates), "no effect" (nothing in a step's memory or time
changes), "not modelled" (it would change memory or time and zerosim leaves it out: said beside the numbers).
Offload (offload_optimizer, offload_param and the deprecated cpu_offload flags) is read into a placement
(zerosim/frameworks/deepspeed/_offload.py, DeepSpeed 0.19.8's runtime/zero/offload_config.py): status "offload".
"""

from __future__ import annotations

import sys

# key -> (JSON type, default, status, note). Types: "int" (a whole number, 5e8 allowed), "bool", "float", "str",
# "object", "offload"; "|null" allows null. Statuses as the module docstring; "refused" raises.
ZERO = {
    "stage": ("int", 0, "modelled", "the ZeRO stage"),
    "contiguous_gradients": ("bool", True, "modelled", "DeepSpeed's gradient bucket buffer: an estimate row"),
    "reduce_scatter": ("bool", True, "modelled", "zerosim reduce-scatters (true); false is not modelled"),
    "reduce_bucket_size": ("int|auto", 500_000_000, "modelled", "CommSchedule.reduce_bucket_size; the bucket estimate"),
    "use_multi_rank_bucket_allreduce": ("bool", True, "not modelled", "merged all-reduce of several ranks' buckets"),
    "allgather_partitions": (
        "bool",
        True,
        "modelled",
        "zerosim all-gathers (true); false (broadcasts) is not modelled",
    ),
    "allgather_bucket_size": (
        "int",
        500_000_000,
        "modelled",
        "ignored, as DeepSpeed ignores it with current torch (runtime/utils.py, "
        "all_gather_dp_groups: one all_gather_into_tensor per partition)",
    ),
    "overlap_comm": ("bool|null", None, "modelled", "CommSchedule.overlap_comm (null: true at stage 3 only)"),
    "load_from_fp32_weights": ("bool", True, "no effect", "checkpoint loading"),
    "elastic_checkpoint": ("bool", False, "no effect", "checkpoint layout"),
    "offload_param": ("offload|null", None, "offload", "parameter offload (OFFLOAD_PARAM)"),
    "offload_optimizer": ("offload|null", None, "offload", "optimizer offload (OFFLOAD_OPTIMIZER)"),
    "zenflow": ("object|null", None, "refused", "ZenFlow (optimizer offload)"),
    "sub_group_size": ("int", 1_000_000_000, "not modelled", "ZeRO-3 steps the optimizer in sub-groups of this size"),
    "cpu_offload_param": ("bool|null", None, "offload", "deprecated: true is offload_param {device: cpu}"),
    "cpu_offload_use_pin_memory": ("bool|null", None, "no effect", "deprecated offload flag"),
    "cpu_offload": ("bool|null", None, "offload", "deprecated: true is offload_optimizer {device: cpu}"),
    "stage3_prefetch_bucket_size": ("int|auto", 50_000_000, "modelled", "CommSchedule.prefetch_bucket_size"),
    "stage3_param_persistence_threshold": (
        "int|auto",
        100_000,
        "not modelled",
        "ZeRO-3 keeps parameters smaller than this whole on every rank",
    ),
    "stage3_model_persistence_threshold": ("int", sys.maxsize, "not modelled", "a cap on persistent parameters"),
    "stage3_max_live_parameters": ("int", 1_000_000_000, "modelled", "CommSchedule.max_live_parameters"),
    "stage3_max_reuse_distance": ("int", 1_000_000_000, "modelled", "CommSchedule.max_reuse_distance"),
    "stage3_gather_16bit_weights_on_model_save": ("bool", False, "no effect", "checkpoint saving"),
    "stage3_module_granularity_threshold": ("int", 0, "not modelled", "merges small modules into one unit"),
    "stage3_use_all_reduce_for_fetch_params": ("bool", False, "not modelled", "gathers by all-reduce"),
    "stage3_allgather_sequential": ("bool", False, "not modelled", "gathers parameters one by one"),
    "stage3_gather_fp16_weights_on_model_save": ("bool", False, "no effect", "checkpoint saving (deprecated)"),
    "ignore_unused_parameters": ("bool", True, "no effect", "every parameter is used here"),
    "legacy_stage1": ("bool", False, "not modelled", "the old stage-1 implementation"),
    "round_robin_gradients": ("bool", False, "no effect", "the order of gradient copies for CPU offload"),
    "zero_hpz_partition_size": ("int", 1, "not modelled", "ZeRO++ hierarchical partitioning (> 1)"),
    "zero_quantized_weights": ("bool", False, "not modelled", "ZeRO++ quantized weight gathers"),
    "zero_quantized_nontrainable_weights": ("bool", False, "not modelled", "ZeRO++ quantized frozen weights"),
    "zero_quantized_gradients": ("bool", False, "not modelled", "ZeRO++ quantized gradient reduction"),
    "zeropp_loco_param": ("object|null", None, "not modelled",
                          "ZeRO++ LoCo error feedback (DeepSpeed <= 0.19.7; 0.19.8 refuses the key)"),
    "mics_shard_size": ("int", -1, "not modelled",
                        "MiCS sharding groups (> 0; DeepSpeed <= 0.19.6, 0.19.7 refuses the key)"),
    "mics_hierarchical_params_gather": ("bool", False, "not modelled",
                                        "MiCS hierarchical gathers (DeepSpeed <= 0.19.6, 0.19.7 refuses the key)"),
    "memory_efficient_linear": ("bool", True, "no effect", "ZeRO-3's Linear autograd wrapper: same saved tensors"),
    "pipeline_loading_checkpoint": ("bool", False, "no effect", "checkpoint loading"),
    "override_module_apply": ("bool", True, "no effect", "module.apply under ZeRO-3"),
    "log_trace_cache_warnings": ("bool", False, "no effect", "logging"),
    "enable_sanity_checks": ("bool", False, "no effect", "debug checks"),
    "save_muon_momentum_buffer_in_memory": ("bool", False, "no effect", "checkpoint saving"),
    "leaf_module": ("object", None, "no effect", "ZeRO-3 leaf modules (hook placement)"),
}
# The two offload objects, DeepSpeed 0.19.8 runtime/zero/offload_config.py: DeepSpeedZeroOffloadOptimizerConfig and
# DeepSpeedZeroOffloadParamConfig (DeepSpeedConfigModel: unknown keys refused; `device` an OffloadDeviceEnum, "none",
# "cpu" or "nvme"). key -> (type, default, status, note); "refused" raises when the value is not the default, "pinned"
# is modelled at its default and not modelled otherwise. The deprecated booleans map as DeepSpeedZeroConfig's
# json_schema_extra new_param_fn says (cpu_offload -> offload_optimizer, cpu_offload_param -> offload_param, both
# {device: cpu}), and with their replacement given too DeepSpeed asserts ("Cannot provide deprecated parameter ... and
# replacing parameter ... together", runtime/config_utils.py _process_deprecated_field).
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
_SHARED = {
    "device": ("str", "none", "modelled", "where the buffers go: parallel/offload's placement"),
    "nvme_path": ("str|null", None, "no effect", "the swap folder: where the bytes go, not how many"),
    "pin_memory": ("bool", True, "pinned", "page-locked host buffers (false: pageable, slower copies)"),
}
OFFLOAD_OPTIMIZER = {
    **_SHARED,
    "buffer_count": ("int", 4, "not modelled", "pinned host buffers of the NVMe swapper"),
    "pipeline_read": ("bool", False, "not modelled", "ZeRO-Infinity: the next tile read while this one steps"),
    "pipeline_write": ("bool", False, "not modelled", "ZeRO-Infinity: the last tile written while this one steps"),
    "fast_init": ("bool", False, "no effect", "the NVMe swapper's initialisation"),
    "ratio": ("float", 1.0, "refused", "Twin-Flow partial offload (ZeRO-Offload++, stage 3)"),
    "super_offload": ("bool", False, "refused", "SuperOffload, for Superchips (stage 3)"),
    "cpuadam_cores_perc": ("float", 0.8, "no effect", "read with super_offload only"),
}
OFFLOAD_PARAM = {
    **_SHARED,
    "buffer_count": ("int", 5, "not modelled", "the NVMe parameter swapper's buffers"),
    "buffer_size": ("int", 100_000_000, "not modelled", "the size of each of those buffers"),
    "max_in_cpu": ("int", 1_000_000_000, "not modelled", "parameter elements kept in host memory with NVMe"),
}
OFFLOAD_DEPRECATED = {"cpu_offload": "offload_optimizer", "cpu_offload_param": "offload_param"}

# DeepSpeedZeroConfig's field names for the "stage3_*" aliases (populate_by_name: both spellings are accepted)
ZERO_ALIASES = {
    k[len("stage3_") :]: k for k in ZERO if k.startswith("stage3_") and k != "stage3_gather_fp16_weights_on_model_save"
}

FP16 = {
    "enabled": ("bool|auto", False, "modelled", "fp16 mixed precision"),
    "auto_cast": ("bool", False, "no effect", "casts float inputs; a Llama's inputs are token ids"),
    "loss_scale": ("float", 0.0, "modelled", "0: DeepSpeed's dynamic scaler; > 0: that static S"),
    "initial_scale_power": ("int", 16, "modelled", "the dynamic scaler starts at 2**power"),
    "loss_scale_window": ("int", 1000, "modelled", "clean steps before the scale grows"),
    "hysteresis": ("int", 2, "modelled", "overflows tolerated before the scale drops"),
    "consecutive_hysteresis": ("bool", False, "modelled", "hysteresis refilled on every clean step"),
    "min_loss_scale": ("int", 1, "modelled", "the scale's floor"),
    "fp16_master_weights_and_grads": ("bool", False, "refused", "fp16 master weights (DeepSpeedCPUAdam only)"),
}
BF16 = {
    "enabled": ("bool|auto", False, "modelled", "bf16 mixed precision"),
    "immediate_grad_update": ("bool", False, "no effect", "when gradients are applied, not their size"),
    "check_grad_overflow": ("bool", True, "no effect", "the overflow check's all-reduce of one flag"),
    "bf16_master_weights_and_grads": ("bool", False, "refused", "bf16 master weights"),
    "bf16_optimizer_states": ("bool", False, "refused", "bf16 optimizer states"),
}

# Top level: key -> (type, default, status, note). Objects not listed here are walked by the reader.
TOP = {
    "train_batch_size": ("int|auto", None, "modelled", "micro-batch × accumulation × ranks (checked)"),
    "train_micro_batch_size_per_gpu": ("int|auto", None, "modelled", "sequences per rank per micro-step (--batch)"),
    "gradient_accumulation_steps": ("int|auto", None, "modelled", "micro-steps per step"),
    "gradient_clipping": (
        "float|auto",
        1.0,
        "modelled",
        "clipping by the global norm (0: off); DeepSpeed's default 1.0",
    ),
    "communication_data_type": ("str|null", None, "modelled", "the gradients' wire format"),
    "zero_allow_untested_optimizer": ("bool", False, "no effect", "a permission, not a size"),
    "zero_force_ds_cpu_optimizer": ("bool", True, "no effect", "offload only"),
    "prescale_gradients": ("bool", False, "not modelled", "divides before the reduction (not DeepSpeed's default)"),
    "gradient_predivide_factor": ("float", 1.0, "not modelled", "a factor divided before and after the reduction"),
    "gradient_allreduce_op": ("str", "mean", "no effect", "averaging is the mean here"),
    "steps_per_print": ("int|null", None, "no effect", "logging"),
    "wall_clock_breakdown": ("bool", False, "no effect", "logging"),
    "memory_breakdown": ("bool", False, "no effect", "logging"),
    "dump_state": ("bool", False, "no effect", "logging"),
    "sparse_gradients": ("bool", False, "not modelled", "sparse embedding gradients"),
    "disable_allgather": ("bool", False, "not modelled", "stage-1/2 refresh by broadcast"),
    "dataloader_drop_last": ("bool", False, "no effect", "data loading"),
    "seed": ("int", 1234, "no effect", "random numbers"),
}
# Top-level objects: "no effect" (logging, monitoring, checkpoint paths) or "not modelled" (features that change
# what a step does, zerosim leaves out). Listed by their whole object.
TOP_OBJECTS = {
    "scheduler": "no effect",
    "tensorboard": "no effect",
    "wandb": "no effect",
    "csv_monitor": "no effect",
    "comet": "no effect",
    "flops_profiler": "no effect",
    "checkpoint": "no effect",
    "aio": "no effect",
    "timers": "no effect",
    "logging": "no effect",
    "comms_logger": "no effect",
    "monitor_config": "no effect",
    "activation_checkpointing": "not modelled",
    "pipeline": "not modelled",
    "tensor_parallel": "not modelled",
    "sequence_parallel_size": "not modelled",
    "compression_training": "not modelled",
    "data_efficiency": "not modelled",
    "curriculum_learning": "not modelled",
    "progressive_layer_drop": "not modelled",
    "eigenvalue": "not modelled",
    "torch_autocast": "not modelled",
    "amp": "not modelled",
    "compile": "not modelled",
    "elasticity": "not modelled",
}
WHY_OBJECT = {
    "activation_checkpointing": "DeepSpeed's own checkpointing API (deepspeed.checkpointing); the model's "
    "checkpointing is --checkpoint",
    "amp": "NVIDIA apex amp (cannot be used with ZeRO)",
}

# DeepSpeed's optimizer types (runtime/config.py, DEEPSPEED_OPTIMIZERS; the type is matched lower-cased) and the
# zerosim optimizer with the same state.
# DeepSpeed's "muon" is MuonWithAuxAdam: Muon on the 2-D hidden matrices, AdamW on the rest (0.19.5
# deepspeed/__init__.py set_optimizer_flags, runtime/engine.py _configure_basic_optimizer): zerosim's muon_adamw
OPTIMIZERS = {"adam": "adam", "adamw": "adamw", "fusedadam": "adam", "lion": "lion", "muon": "muon_adamw"}

# Values DeepSpeed v0.19.5 refuses, or that would break it, per dotted key: (the test a value passes, its words, the
# rule and where it is). The reader checks every value a file gives against these and names the file and the key;
# nothing is coerced in silence (a 0 zerosim runs as 1 says so in the key's note: ZERO_AS_ONE).
FP32_MAX = 3.4028234663852886e38
_GE0 = (lambda v: v >= 0, "at least 0", "DeepSpeedZeroConfig: Field(ge=0) (runtime/zero/config.py)")
LIMITS = {
    **{f"zero_optimization.{k}": _GE0 for k in (
        "reduce_bucket_size", "allgather_bucket_size", "sub_group_size", "stage3_prefetch_bucket_size",
        "stage3_param_persistence_threshold", "stage3_model_persistence_threshold", "stage3_max_live_parameters",
        "stage3_max_reuse_distance", "zero_hpz_partition_size")},
    "zero_optimization.stage3_module_granularity_threshold": (lambda v: v >= 0, "at least 0",
                                                              "a parameter count: 0 turns it off"),
    "zero_optimization.mics_shard_size": (lambda v: v == -1 or v >= 1, "-1 (off) or at least 1",
                                          "the ranks of a MiCS shard group"),
    **{f"zero_optimization.{o}.{k}": (lambda v: v >= 0, "at least 0", "Field(ge=0) (runtime/zero/offload_config.py)")
       for o, keys in (("offload_optimizer", ("buffer_count",)), ("offload_param", ("buffer_count", "buffer_size",
                                                                                    "max_in_cpu"))) for k in keys},
    **{f"zero_optimization.offload_optimizer.{k}": (lambda v: 0 <= v <= 1, "between 0 and 1",
                                                    "Field(ge=0.0, le=1.0) (runtime/zero/offload_config.py)")
       for k in ("ratio", "cpuadam_cores_perc")},
    "fp16.loss_scale": (lambda v: 0 <= v <= FP32_MAX, "0 (dynamic) or a static scale up to fp32's largest, 3.4e38",
                        "DeepSpeedFP16Config._validate_loss_scale, runtime/precision_config.py: '0 enables dynamic "
                        "loss scaling'; the scale multiplies an fp32 loss"),
    "fp16.hysteresis": (lambda v: v >= 1, "at least 1", "DynamicLossScaler.update_scale lowers the scale when "
                        "cur_hysteresis reaches 1; from 0 it counts down past it and never does "
                        "(runtime/fp16/loss_scaler.py)"),
    "fp16.initial_scale_power": (lambda v: 0 <= v <= 127, "0 to 127", "the scale 2**power is held in fp32, where "
                                 "2**128 overflows, and starts at min_loss_scale (at least 1) or above"),
    "gradient_predivide_factor": (lambda v: v > 0, "> 0", "the gradients are divided by it"),
    "steps_per_print": (lambda v: v >= 1, "at least 1", "DeepSpeed prints when global_steps % steps_per_print == 0"),
}
# fp16.loss_scale_window and fp16.min_loss_scale are checked only where DeepSpeed checks them, with dynamic loss
# scaling on (DeepSpeedFP16Config._validate_dynamic_loss_scale_params): both must be > 0.
DYNAMIC_LIMITS = {"loss_scale_window": "DynamicLossScaler.update_scale takes stable_interval % scale_window",
                  "min_loss_scale": "the loss scale's floor collapses at 0"}
# A 0 DeepSpeed accepts (ge=0) whose behaviour zerosim's schedule has at 1: said in the key's note, never silent.
ZERO_AS_ONE = {
    "reduce_bucket_size": "0: every parameter's gradient is reduced on its own (stage_1_and_2.py and stage3.py: a "
                          "parameter larger than the bucket goes alone), which zerosim runs as a bucket of 1",
    "stage3_max_live_parameters": "0: nothing is prefetched (partitioned_param_coordinator.py: min(max_live - live, "
                                  "prefetch_bucket) <= 0), which zerosim runs as 1",
}
# optimizer.params zerosim reads the kind of, or that torch's optimizers check (torch/optim/adam.py, sgd.py
# `__init__`: "Invalid learning rate", "Invalid epsilon value", "Invalid beta parameter", ...): (test, words).
OPTIMIZER_PARAMS = {
    "lr": (lambda v: _number(v) and v >= 0, "a number >= 0"),
    "eps": (lambda v: _number(v) and v >= 0, "a number >= 0"),
    "weight_decay": (lambda v: _number(v) and v >= 0, "a number >= 0"),
    "momentum": (lambda v: _number(v) and v >= 0, "a number >= 0"),
    "betas": (lambda v: isinstance(v, list) and len(v) == 2 and all(_number(b) and 0 <= b < 1 for b in v),
              "two numbers in [0, 1)"),
}


def _number(v) -> bool:
    import math

    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
