"""A DeepSpeed config (ds_config.json) as input: the stage, the communication schedule, the precision, the batch,
clipping and the optimizer it describes — every key reported as modelled, not modelled or no effect.

    run = read_ds_config("ds_config.json", world_size=64, hidden_size=8192)
    run.stage, run.comm, run.precision, run.micro_batch, run.accumulation_steps, run.clip_grad
    [k for k in run.keys if k.status == "not modelled"]

Key names, types and defaults are DeepSpeed's (_keys.py cites the files). The relations DeepSpeed enforces
are enforced here the same way (runtime/config.py): train_batch_size = micro-batch × accumulation × ranks
(`_batch_assertion`), a missing one of the three derived from the others (`_set_batch_related_parameters`),
fp16 and bf16 not both on (`_do_error_check`), zero_optimization's unknown keys refused (`extra="forbid"`).

"auto" is Hugging Face's Trainer's placeholder (transformers, integrations/deepspeed.py,
`HfTrainerDeepSpeedConfig.trainer_config_process` and `trainer_config_finalize`); it is filled as the Trainer fills
it: train_micro_batch_size_per_gpu from per_device_train_batch_size, gradient_accumulation_steps from its
namesake, train_batch_size = ranks × both, gradient_clipping from max_grad_norm, optimizer.params lr, betas, eps and
weight_decay from learning_rate, [adam_beta1, adam_beta2], adam_epsilon and weight_decay (`trainer_config_process`'s
`fill_match` calls, transformers 5.23.0), fp16/bf16.enabled from the fp16/bf16 flags, reduce_bucket_size =
hidden_size², stage3_prefetch_bucket_size = 0.9·hidden_size² and stage3_param_persistence_threshold =
10·hidden_size (stage 3). zerosim's own flags stand for the Trainer's arguments (`TrainerArgs`); an argument not
given takes TrainingArguments' default, and the report says so.
Offload (offload_optimizer, offload_param, the deprecated cpu_offload flags) is read by _offload.py into the placement
DeepSpeed 0.19.8 runs at the config's stage (`DeepSpeedRun.offload`).
"""

from __future__ import annotations

import math
import numbers

from zerosim._dataclass import dataclass
from zerosim.analysis.costs import DeepSpeedBuckets
from dataclasses import replace

from zerosim.frameworks.deepspeed._keys import (
    BF16,
    DYNAMIC_LIMITS,
    FP16,
    LIMITS,
    OPTIMIZER_PARAMS,
    OPTIMIZERS,
    TOP,
    TOP_OBJECTS,
    WHY_OBJECT,
    ZERO,
    ZERO_ALIASES,
    ZERO_AS_ONE,
)
from zerosim.frameworks.deepspeed._offload import read_offload
from zerosim.models.hf import KeyStatus, read_json_object
from zerosim.parallel.data import CommSchedule, check_stage
from zerosim.precision import MixedPrecision


@dataclass(frozen=True)
class TrainerArgs:
    """What the HF Trainer would fill "auto" from; None takes TrainingArguments' default (in brackets)."""

    per_device_train_batch_size: int | None = None  # [8]; zerosim's --batch
    gradient_accumulation_steps: int | None = None  # [1]; --accumulation-steps
    max_grad_norm: float | None = None  # [1.0]
    fp16: bool | None = None  # [False]; --precision fp16-mixed
    bf16: bool | None = None  # [False]; --precision bf16-mixed
    learning_rate: float | None = None  # [5e-5]: optimizer.params.lr
    adam_beta1: float | None = None  # [0.9]: optimizer.params.betas[0]
    adam_beta2: float | None = None  # [0.999]: optimizer.params.betas[1]
    adam_epsilon: float | None = None  # [1e-8]: optimizer.params.eps
    weight_decay: float | None = None  # [0.0]: optimizer.params.weight_decay


TRAINER_DEFAULTS = {
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "max_grad_norm": 1.0,
    "fp16": False,
    "bf16": False,
    # transformers 5.23.0 training_args.py TrainingArguments: learning_rate 5e-5, weight_decay 0.0, adam_beta1 0.9,
    # adam_beta2 0.999, adam_epsilon 1e-8
    "learning_rate": 5e-5,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "weight_decay": 0.0,
}
# optimizer.params keys the Trainer fills when "auto" (integrations/deepspeed.py, HfTrainerDeepSpeedConfig.
# trainer_config_process: fill_match("optimizer.params.lr", args.learning_rate), ("optimizer.params.betas",
# [args.adam_beta1, args.adam_beta2]), ("optimizer.params.eps", args.adam_epsilon), ("optimizer.params.weight_decay",
# args.weight_decay)): key -> the TrainingArguments fields it comes from
AUTO_OPTIMIZER_PARAMS = {"lr": ("learning_rate",), "betas": ("adam_beta1", "adam_beta2"), "eps": ("adam_epsilon",),
                         "weight_decay": ("weight_decay",)}


@dataclass(frozen=True)
class DeepSpeedRun:
    """What a ds_config.json makes zerosim run."""

    stage: int
    comm: CommSchedule  # the buckets, prefetch and overlap knobs
    precision: MixedPrecision  # compute, master, wire format, loss scaling, gradient accumulation format
    precision_name: str  # "fp16-mixed", "bf16-mixed" or "fp32": the preset whose byte sizes these are
    micro_batch: int  # sequences per rank per micro-step
    accumulation_steps: int
    train_batch_size: int  # sequences per step over all ranks
    clip_grad: float | None  # None: no clipping
    optimizer: str  # a zerosim optimizer name
    buckets: DeepSpeedBuckets  # for the bucket-buffer estimate
    keys: tuple  # (KeyStatus, ...) every key of the file, dotted
    offload: object = None  # the parallel.offload.Placement DeepSpeed runs for its offload keys at `stage`, or None
    optimizer_params: tuple = ()  # ((key, value), ...): the config's optimizer.params as written ("auto" kept)

    def status(self, status: str) -> list:
        return [k for k in self.keys if k.status == status]

    @property
    def recipe(self) -> str | None:
        """The gradient recipe DeepSpeed 0.19.8 runs at this stage (parallel/data/recipes): stage_1_and_2.py's
        ("deepspeed-zero12"), BF16_Optimizer's for bf16 with grad_accum_dtype fp32 at stage 1 (runtime/engine.py:
        _do_optimizer_sanity_check), stage3.py's ("deepspeed-zero3"); None at stage 0, whose all-reduce (engine.py:
        allreduce_gradients) zerosim does not model as a recipe."""
        if self.stage == 1 and (self.precision.compute, self.precision.grad_accum) == ("bf16", "fp32"):
            return "deepspeed-bf16-optimizer"
        return {1: "deepspeed-zero12", 2: "deepspeed-zero12", 3: "deepspeed-zero3"}.get(self.stage)


def read_ds_config(
    source, world_size: int, hidden_size: int | None = None, trainer: TrainerArgs = TrainerArgs()
) -> DeepSpeedRun:
    """A `DeepSpeedRun` from a ds_config.json path or a parsed dict, for `world_size` ranks (see the module docstring).

    `hidden_size`: the model's, for the "auto" bucket sizes. Raises ValueError naming the key for a wrong type, an
    unknown stage or key, an offload DeepSpeed does not run or zerosim does not model, or batch sizes that disagree."""
    raw, where = read_json_object(source, "the DeepSpeed config", "a DeepSpeed config is one JSON object")
    return _Reader(raw, where, world_size, hidden_size, trainer).run()


class _Reader:
    def __init__(self, raw, where, world_size, hidden_size, trainer):
        self.raw, self.where, self.N, self.hidden, self.trainer = raw, where, world_size, hidden_size, trainer
        self.keys = []

    # -- values --------------------------------------------------------------------------------------------
    def value(self, table: dict, section: str, key: str, obj: dict):
        """obj[key] checked against table[key]'s type, or its default; "auto" kept as the string."""
        kind, default, status, note = table[key]
        if key not in obj:
            return default
        v, name = obj[key], f"{section}{key}"
        if v is None and "null" in kind:
            return None
        if v == "auto" and "auto" in kind:
            return "auto"
        base = kind.split("|")[0]
        ok = {
            "int": lambda: isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and v == int(v),
            "bool": lambda: isinstance(v, bool),
            "float": lambda: isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v),
            "str": lambda: isinstance(v, str),
            "object": lambda: isinstance(v, dict),
            "offload": lambda: isinstance(v, dict),
        }[base]()
        if not ok:
            what = {
                "int": "a whole number",
                "bool": "true or false",
                "float": "a number",
                "str": "a string",
                "object": "an object",
                "offload": "an object",
            }[base]
            extra = ' or "auto"' if "auto" in kind else ""
            raise ValueError(f"{self.where}: {name} must be {what}{extra}, got {v!r}")
        v = int(v) if base == "int" else float(v) if base == "float" else v
        if name in LIMITS and not LIMITS[name][0](v):
            _, words, why = LIMITS[name]
            raise ValueError(f"{self.where}: {name} must be {words}, got {obj[key]!r} ({why})")
        return v

    def report(self, key, value, status, note=""):
        self.keys.append(KeyStatus(key, value, status, note))

    def note(self, key, text):
        """Add `text` to the note of the key reported as `key`."""
        self.keys = [replace(k, note=f"{k.note}; {text}" if k.note else text) if k.key == key else k
                     for k in self.keys]

    def value_of_zero(self, key, zero):
        return self.value(ZERO, "zero_optimization.", key, zero)

    def auto(self, name: str, value, source: str, given) -> object:
        self.report(
            name,
            "auto",
            "modelled",
            f"auto -> {value!r} ({source}" + ("" if given else ", TrainingArguments' default") + ")",
        )
        return value

    def trainer_value(self, field: str):
        given = getattr(self.trainer, field)
        return (given, True) if given is not None else (TRAINER_DEFAULTS[field], False)

    # -- sections ------------------------------------------------------------------------------------------
    def run(self) -> DeepSpeedRun:
        zero = self.section_zero()
        precision, name = self.section_precision(zero["stage"])
        micro, gas, total = self.section_batch()
        clip = self.section_clip()
        optimizer = self.section_optimizer(zero["stage"])
        self.section_rest()
        comm = CommSchedule.deepspeed(
            reduce_bucket_size=zero["reduce_bucket_size"] or 1,
            stage3_prefetch_bucket_size=zero["stage3_prefetch_bucket_size"],
            stage3_max_live_parameters=zero["stage3_max_live_parameters"] or 1,
            stage3_max_reuse_distance=zero["stage3_max_reuse_distance"],
            overlap_comm=zero["overlap_comm"],
        )
        buckets = DeepSpeedBuckets(
            zero["reduce_bucket_size"], zero["contiguous_gradients"], zero["overlap_comm"], 4 if name == "fp32" else 2
        )  # the IPG buffers hold the parameters' dtype
        return DeepSpeedRun(
            zero["stage"], comm, precision, name, micro, gas, total, clip, optimizer, buckets, tuple(self.keys),
            zero["offload"], tuple(sorted(self.optimizer_params.items())),
        )

    def section_zero(self) -> dict:
        obj = self.raw.get("zero_optimization", {})
        if not isinstance(obj, dict):
            raise ValueError(f"{self.where}: zero_optimization must be an object, got {obj!r}")
        obj = {ZERO_ALIASES.get(k, k): v for k, v in obj.items()}  # DeepSpeed accepts field names and "stage3_" aliases
        unknown = [k for k in obj if k not in ZERO]
        if unknown:
            raise ValueError(
                f"{self.where}: zero_optimization.{unknown[0]} is not a DeepSpeed ZeRO key "
                "(DeepSpeedZeroConfig refuses unknown keys too)"
            )
        stage = self.value(ZERO, "zero_optimization.", "stage", obj)
        check_stage(stage, f"{self.where}: zero_optimization.stage")
        out = {}
        for key in ZERO:
            value = self.value(ZERO, "zero_optimization.", key, obj)
            if value == "auto":  # the HF Trainer fills these three from the model's hidden_size
                value = self.auto_bucket(key, stage)
            elif key in obj and ZERO[key][2] != "offload":  # the offload keys: _offload.py, below
                self.report_zero(key, value, obj[key], stage)
            out[key] = value
        out["offload"] = read_offload(self, obj, stage)
        if out["overlap_comm"] is None:  # DeepSpeedZeroConfig.overlap_comm_valid: on at stage 3 only
            out["overlap_comm"] = stage == 3
        return out

    def auto_bucket(self, key: str, stage: int):
        if self.hidden is None:
            raise ValueError(
                f'{self.where}: zero_optimization.{key} is "auto", which the HF Trainer fills from the '
                "model's hidden_size: give the model's shape (--config or --model)"
            )
        h = self.hidden
        if key == "reduce_bucket_size":
            return self.auto(f"zero_optimization.{key}", h * h, "hidden_size²", True)
        if stage != 3:  # trainer_config_finalize fills these at stage 3 only; elsewhere DeepSpeed ignores them
            self.report(f"zero_optimization.{key}", "auto", "no effect", "read at stage 3 only")
            return ZERO[key][1]
        if key == "stage3_prefetch_bucket_size":
            return self.auto(f"zero_optimization.{key}", int(0.9 * h * h), "0.9·hidden_size², truncated", True)
        self.report(
            f"zero_optimization.{key}", "auto", "not modelled", f"auto -> {10 * h} (10·hidden_size); " + ZERO[key][3]
        )
        return 10 * h

    def report_zero(self, key, value, raw_value, stage):
        kind, default, status, note = ZERO[key]
        name = f"zero_optimization.{key}"
        if status == "refused":
            device = value.get("device", "none") if isinstance(value, dict) else value
            if device in ("none", None, False):
                self.report(name, raw_value, "no effect", "device none: no offload")
                return
            raise ValueError(
                f"{self.where}: {name} ({note}) is not modelled yet: zerosim would need CPU/NVMe memory "
                'and PCIe traffic it does not simulate; remove it or set its device to "none"'
            )
        if key == "reduce_scatter" and value is False:
            status, note = "not modelled", "false makes DeepSpeed all-reduce instead; zerosim reduce-scatters"
        elif key == "allgather_partitions" and value is False:
            status, note = "not modelled", "false makes DeepSpeed broadcast instead; zerosim all-gathers"
        elif key.startswith("stage3_") and stage != 3 and status == "modelled":
            status, note = "no effect", "read at stage 3 only"
        elif status == "not modelled" and value == default:
            status, note = "no effect", "DeepSpeed's default: " + note
        if key in ZERO_AS_ONE and value == 0 and status == "modelled":
            note = ZERO_AS_ONE[key]
        self.report(name, raw_value, status, note)

    def section_precision(self, stage: int) -> tuple:
        """The fp16 / bf16 sections and communication_data_type, each key reported: (MixedPrecision, its name)."""
        fp16, bf16 = self.raw.get("fp16", {}), self.raw.get("bf16", self.raw.get("bfloat16", {}))
        on = self._precision_sections(fp16, bf16)
        if on["fp16"] and on["bf16"]:
            raise ValueError(
                f"{self.where}: fp16 and bf16 are both enabled; DeepSpeed refuses that too "
                "('bfloat16 and fp16 modes cannot be simultaneously enabled')"
            )
        wire = self._wire_format()
        accum = self.section_data_types()
        if not (on["fp16"] or on["bf16"]):
            return MixedPrecision(compute="fp32", master=None, reduce=wire and wire.lower()), "fp32"
        compute = "fp16" if on["fp16"] else "bf16"
        scale, options = self._fp16_scale(fp16) if on["fp16"] else (1.0, ())
        policy = MixedPrecision(
            compute=compute,
            master="fp32",
            reduce=wire and wire.lower(),
            loss_scale=scale,
            loss_scale_options=options,
            grad_accum=accum,
        )
        return policy, f"{compute}-mixed"

    def _precision_sections(self, fp16: dict, bf16: dict) -> dict:
        """The fp16 and bf16 sections checked and each key reported: {"fp16": enabled, "bf16": enabled}."""
        for section, obj, table in (("fp16", fp16, FP16), ("bf16", bf16, BF16)):
            if not isinstance(obj, dict):
                raise ValueError(f"{self.where}: {section} must be an object, got {obj!r}")
            unknown = [k for k in obj if k not in table]
            if unknown:
                raise ValueError(f"{self.where}: {section}.{unknown[0]} is not a DeepSpeed {section} key")
        on = {}
        for section, obj, table, flag in (("fp16", fp16, FP16, "fp16"), ("bf16", bf16, BF16, "bf16")):
            enabled = self.value(table, f"{section}.", "enabled", obj)
            if enabled == "auto":
                value, given = self.trainer_value(flag)
                enabled = self.auto(f"{section}.enabled", value, f"the Trainer's --{flag}", given)
            elif "enabled" in obj:
                self.report(f"{section}.enabled", enabled, "modelled", table["enabled"][3])
            on[section] = enabled
            for key in obj:
                if key == "enabled":
                    continue
                value = self.value(table, f"{section}.", key, obj)
                status, note = table[key][2], table[key][3]
                if status == "refused" and value:
                    raise ValueError(
                        f"{self.where}: {section}.{key} ({note}) is not modelled: zerosim keeps an fp32 "
                        "master and fp32 optimizer states"
                    )
                if status == "refused" or (section == "fp16" and not enabled):
                    status, note = "no effect", note if status != "refused" else "false: " + note
                self.report(f"{section}.{key}", obj[key], status, note)
        return on

    def _wire_format(self):
        """communication_data_type, checked and reported (None when not given)."""
        wire = self.value(TOP, "", "communication_data_type", self.raw)
        if wire is not None and wire.lower() not in ("fp32", "fp16", "bf16"):
            raise ValueError(f"{self.where}: communication_data_type must be fp32, fp16 or bf16, got {wire!r}")
        if "communication_data_type" in self.raw:
            self.report("communication_data_type", wire, "modelled", TOP["communication_data_type"][3])
        return wire

    def _fp16_scale(self, fp16: dict) -> tuple:
        """fp16's loss scale: a static one, or "deepspeed" (its DynamicLossScaler) with the config's options."""
        static = self.value(FP16, "fp16.", "loss_scale", fp16)
        if static > 0:
            return static, ()
        # DeepSpeed's DynamicLossScaler with the config's options (precision/_loss_scaling.py)
        self.check_dynamic(fp16)
        return "deepspeed", (
            ("init_scale", 2.0 ** self.value(FP16, "fp16.", "initial_scale_power", fp16)),
            ("scale_window", self.value(FP16, "fp16.", "loss_scale_window", fp16)),
            ("hysteresis", self.value(FP16, "fp16.", "hysteresis", fp16)),
            ("min_scale", float(self.value(FP16, "fp16.", "min_loss_scale", fp16))),
            ("consecutive_hysteresis", self.value(FP16, "fp16.", "consecutive_hysteresis", fp16)),
        )

    def check_dynamic(self, fp16: dict) -> None:
        """What DeepSpeed checks with dynamic loss scaling on (DYNAMIC_LIMITS), and a first scale at its floor or above
        (zerosim's scaler starts at 2**initial_scale_power and never goes below min_loss_scale)."""
        for key, why in DYNAMIC_LIMITS.items():
            if self.value(FP16, "fp16.", key, fp16) < 1:
                raise ValueError(f"{self.where}: fp16.{key} must be > 0 with dynamic loss scaling (loss_scale 0), "
                                 f"got {fp16[key]!r} ({why}; DeepSpeed refuses it too)")
        power, floor = (self.value(FP16, "fp16.", k, fp16) for k in ("initial_scale_power", "min_loss_scale"))
        if 2.0**power < floor:
            raise ValueError(f"{self.where}: fp16.initial_scale_power {power} starts the scale at {2.0**power:g}, "
                             f"below fp16.min_loss_scale {floor}: the scale never goes below its floor")

    def section_data_types(self):
        obj = self.raw.get("data_types", {})
        if not isinstance(obj, dict):
            raise ValueError(f"{self.where}: data_types must be an object, got {obj!r}")
        for key, v in obj.items():
            if key != "grad_accum_dtype":
                self.report(f"data_types.{key}", v, "not modelled", "unknown to zerosim")
            elif v not in ("fp32", "fp16", "bf16", None):
                raise ValueError(f"{self.where}: data_types.grad_accum_dtype must be fp32, fp16 or bf16, got {v!r}")
            else:
                self.report("data_types.grad_accum_dtype", v, "modelled", "gradients accumulate in this format")
        return "fp32" if obj.get("grad_accum_dtype") == "fp32" else None

    def section_batch(self) -> tuple:
        vals = {
            k: self.value(TOP, "", k, self.raw)
            for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
        }
        for key, field in (
            ("train_micro_batch_size_per_gpu", "per_device_train_batch_size"),
            ("gradient_accumulation_steps", "gradient_accumulation_steps"),
        ):
            if vals[key] == "auto":
                value, given = self.trainer_value(field)
                vals[key] = self.auto(key, value, f"the Trainer's {field}", given)
            elif key in self.raw:
                self.report(key, vals[key], "modelled", TOP[key][3])
        total, micro, gas = (
            vals["train_batch_size"],
            vals["train_micro_batch_size_per_gpu"],
            vals["gradient_accumulation_steps"],
        )
        if total == "auto":  # trainer_config_process: world_size × per-device batch × accumulation
            if micro is None or gas is None:
                raise ValueError(
                    f'{self.where}: train_batch_size is "auto": give train_micro_batch_size_per_gpu and '
                    'gradient_accumulation_steps (or "auto") too'
                )
            total = self.auto("train_batch_size", self.N * micro * gas, "ranks × micro-batch × accumulation", True)
        elif "train_batch_size" in self.raw:
            self.report("train_batch_size", total, "modelled", TOP["train_batch_size"][3])
        # DeepSpeed's _set_batch_related_parameters, then _batch_assertion
        if total is not None and micro is not None and gas is None:
            gas = total // micro // self.N
        elif total is not None and gas is not None and micro is None:
            micro = total // self.N // gas
        elif micro is not None and gas is not None and total is None:
            total = micro * gas * self.N
        elif total is not None and micro is None and gas is None:
            gas, micro = 1, total // self.N
        elif micro is not None and total is None and gas is None:
            total, gas = micro * self.N, 1
        elif total is None and micro is None:
            raise ValueError(
                f"{self.where}: give train_batch_size or train_micro_batch_size_per_gpu (DeepSpeed needs one of them)"
            )
        for name, v in (
            ("train_batch_size", total),
            ("train_micro_batch_size_per_gpu", micro),
            ("gradient_accumulation_steps", gas),
        ):
            if v < 1:
                given = ", ".join(f"{k} {self.raw[k]}" for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                                               "gradient_accumulation_steps") if k in self.raw)
                raise ValueError(f"{self.where}: {name} comes to {v} from {given} on {self.N} ranks; it must be at "
                                 "least 1")
        if total != micro * gas * self.N:
            raise ValueError(
                f"{self.where}: train_batch_size {total} is not train_micro_batch_size_per_gpu {micro} × "
                f"gradient_accumulation_steps {gas} × {self.N} ranks = {micro * gas * self.N}"
            )
        return micro, gas, total

    def section_clip(self):
        clip = self.value(TOP, "", "gradient_clipping", self.raw)
        if clip == "auto":
            value, given = self.trainer_value("max_grad_norm")
            clip = self.auto("gradient_clipping", value, "the Trainer's max_grad_norm", given)
        elif "gradient_clipping" in self.raw:
            self.report("gradient_clipping", clip, "modelled", TOP["gradient_clipping"][3])
        if clip < 0:
            raise ValueError(f"{self.where}: gradient_clipping must be >= 0 (0 turns it off), got {clip!r}")
        return clip or None

    def section_optimizer(self, stage: int) -> str:
        self.optimizer_params = {}
        obj = self.raw.get("optimizer")
        if obj is None:  # no optimizer in the config: the HF Trainer's AdamW (integrations/deepspeed.py)
            return "adamw"
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            raise ValueError(f'{self.where}: optimizer must be an object with a "type" string, got {obj!r}')
        kind = obj["type"].lower()
        params = obj.get("params", {})
        if not isinstance(params, dict):
            raise ValueError(f"{self.where}: optimizer.params must be an object (the optimizer's arguments), "
                             f"got {params!r}")
        self.optimizer_params = dict(params)  # as written, "auto" kept: `train --ds-config` fills it from its flags
        params = dict(params)
        for key, fields in AUTO_OPTIMIZER_PARAMS.items():  # "auto": filled as the Trainer fills it, and said
            if params.get(key) == "auto":
                values = [self.trainer_value(f) for f in fields]
                value = [v for v, _ in values] if len(values) > 1 else values[0][0]
                params[key] = value
                default = "" if all(given for _, given in values) else ", TrainingArguments' default"
                self.report(f"optimizer.params.{key}", "auto", "no effect", f"auto -> {value!r} (the Trainer's "
                            f"{' and '.join(fields)}{default}); the update's numbers, not its memory or time")
        auto = [k for k, v in params.items() if v == "auto"]
        if auto:  # the Trainer fills only the four above; DeepSpeed itself would fail on the string
            raise ValueError(f'{self.where}: optimizer.params.{auto[0]} is "auto", which the HF Trainer does not fill '
                             f"(it fills {', '.join(AUTO_OPTIMIZER_PARAMS)}): give a value")
        for key, (ok, words) in OPTIMIZER_PARAMS.items():
            if key in params and not ok(params[key]):
                raise ValueError(f"{self.where}: optimizer.params.{key} must be {words}, got {params[key]!r} "
                                 "(torch's optimizers refuse it too)")
        if kind == "sgd":
            name = "sgd_momentum" if params.get("momentum", 0) > 0 else "sgd"
        elif kind in OPTIMIZERS:
            name = OPTIMIZERS[kind]
        else:
            raise ValueError(
                f"{self.where}: optimizer type {obj['type']!r} is not one zerosim models "
                f"({', '.join(sorted({*OPTIMIZERS, 'sgd'}))})"
            )
        self.report("optimizer.type", obj["type"], "modelled", f"zerosim's {name!r}: its state's bytes per parameter")
        filled = {k.key for k in self.keys}
        for key, v in params.items():
            if f"optimizer.params.{key}" in filled:  # an "auto" filled above: reported there, with its source
                continue
            self.report(f"optimizer.params.{key}", v, "no effect", "the update's numbers, not its memory or time")
        return name

    def section_rest(self) -> None:
        done = {
            "zero_optimization",
            "fp16",
            "bf16",
            "bfloat16",
            "optimizer",
            "data_types",
            "train_batch_size",
            "train_micro_batch_size_per_gpu",
            "gradient_accumulation_steps",
            "gradient_clipping",
            "communication_data_type",
        }
        for key, v in self.raw.items():
            if key in done:
                continue
            if key in TOP:
                value = self.value(TOP, "", key, self.raw)
                status, note = TOP[key][2], TOP[key][3]
                if status == "not modelled" and value == TOP[key][1]:
                    status, note = "no effect", "DeepSpeed's default: " + note
                self.report(key, v, status, note)
            elif key in TOP_OBJECTS:
                self.report(key, v, TOP_OBJECTS[key], WHY_OBJECT.get(key, ""))
            else:
                self.report(
                    key,
                    v,
                    "not modelled",
                    "unknown to zerosim: if it changes memory or time, the numbers here do not show it",
                )
