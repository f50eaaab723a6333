"""A DeepSpeed config (ds_config.json) as input: read into what zerosim runs.

    _config.py  read_ds_config: the stage, CommSchedule, MixedPrecision, batch, clipping and optimizer of a
                ds_config.json, every key reported (modelled, not modelled, no effect); HF Trainer's "auto" filled
    _keys.py    DeepSpeed's keys as data: type, default, what zerosim does with each (sources cited there)
    samples/    ds_config_zero2.json, ds_config_zero3.json: the HF Trainer's usual configs, "auto" included

This package sits above the data-parallel step (it builds its CommSchedule and a precision policy) and below the
CLI: reading a file is neither an analytic cost nor a thin command.
"""

from zerosim.frameworks.deepspeed._config import DeepSpeedRun, KeyStatus, TrainerArgs, read_ds_config

__all__ = ["DeepSpeedRun", "KeyStatus", "TrainerArgs", "read_ds_config", "sample_ds_config"]


def sample_ds_config(name: str):
    """The path of a sample shipped in zerosim/frameworks/deepspeed/samples ("zero2" or "zero3")."""
    from importlib import resources

    names = ("zero2", "zero3")
    if name not in names:
        raise ValueError(f"no sample DeepSpeed config {name!r}; samples: {', '.join(names)}")
    return resources.files("zerosim.frameworks.deepspeed") / "samples" / f"ds_config_{name}.json"
