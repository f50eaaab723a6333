"""A DeepSpeed config's offload keys read into the placement zerosim runs: zero_optimization.offload_optimizer and
.offload_param (DeepSpeed 0.19.8 runtime/zero/offload_config.py), and the deprecated cpu_offload / cpu_offload_param.

Every value is checked against _keys.py's OFFLOAD_OPTIMIZER / OFFLOAD_PARAM (type, bounds, unknown keys refused as
DeepSpeedConfigModel refuses them) and reported with its status, naming the file and the dotted key. What DeepSpeed
runs for the two devices at the config's stage is `parallel/offload.deepspeed_placement`'s: at stages 1/2 an NVMe
optimizer is CPU offload and offload_param is not read (said in the keys' notes); at stage 0 nothing offloads (refused).
"""

from __future__ import annotations

import json

from zerosim.frameworks.deepspeed._keys import OFFLOAD_DEPRECATED, OFFLOAD_DEVICES, OFFLOAD_OPTIMIZER, OFFLOAD_PARAM
from zerosim.parallel.offload import deepspeed_placement

TABLES = {"offload_optimizer": OFFLOAD_OPTIMIZER, "offload_param": OFFLOAD_PARAM}


def read_offload(reader, zero: dict, stage: int):
    """The Placement DeepSpeed runs for `zero`'s offload keys at `stage` (None: nothing offloaded); every key reported
    on `reader` (_config.py's _Reader: its `value`, `report` and `where`)."""
    devices = {}
    for old, new in OFFLOAD_DEPRECATED.items():
        if old not in zero:
            continue
        flag = reader.value_of_zero(old, zero)
        if flag and zero.get(new) is not None:
            raise ValueError(f"{reader.where}: zero_optimization.{old} is deprecated for {new}, and both are given; "
                             f"DeepSpeed refuses that too ('Cannot provide deprecated parameter {old!r} and "
                             f"replacing parameter {new!r} together'): keep {new}")
        reader.report(f"zero_optimization.{old}", zero[old], "modelled" if flag else "no effect",
                      f"deprecated: read as {new} {{device: cpu}}" if flag else "false: no offload")
        if flag:
            devices[new] = "cpu"
    for key, table in TABLES.items():
        obj = zero.get(key)
        if obj is None:
            continue
        devices[key] = _read_object(reader, key, obj, table, stage)
    optimizer, params = devices.get("offload_optimizer"), devices.get("offload_param")
    if optimizer in (None, "none") and params in (None, "none"):
        return None
    try:
        placement, notes = deepspeed_placement(stage, optimizer, params)
    except ValueError as e:
        key = "offload_param" if params not in (None, "none") and optimizer in (None, "none") else "offload_optimizer"
        raise ValueError(f"{reader.where}: zero_optimization.{key}: {e}") from None
    for note in notes:  # what DeepSpeed runs otherwise than the keys read, on the key it concerns
        key = "offload_param" if "offload_param" in note.split(" (")[0] else "offload_optimizer"
        reader.note(f"zero_optimization.{key}.device", note)
    return None if placement.name == "none" else placement


def _read_object(reader, key: str, obj: dict, table: dict, stage: int) -> str:
    """One offload object's keys, checked and reported; returns its device."""
    section = f"zero_optimization.{key}."
    unknown = [k for k in obj if k not in table]
    if unknown:
        raise ValueError(f"{reader.where}: {section}{unknown[0]} is not a DeepSpeed {key} key (runtime/zero/"
                         f"offload_config.py: {', '.join(table)}; DeepSpeedConfigModel refuses unknown keys too)")
    device = reader.value(table, section, "device", obj)
    if device not in OFFLOAD_DEVICES:
        raise ValueError(f"{reader.where}: {section}device must be one of {', '.join(OFFLOAD_DEVICES)} "
                         f"(OffloadDeviceEnum), got {obj.get('device')!r}")
    on = device != "none"
    if device == "nvme" and stage == 3 and reader.value(table, section, "nvme_path", obj) is None:  # (1/2: unread)
        raise ValueError(f"{reader.where}: {section}device is nvme with no nvme_path: DeepSpeed 0.19.8 swaps into "
                         "nvme_path (partition_parameters.py asserts it for offload_param; stage3.py joins it for the "
                         "optimizer's swap folder): give the folder")
    for k in obj:
        value = reader.value(table, section, k, obj)
        kind, default, status, note = table[k]
        if k == "device":
            status, note = ("modelled", note) if on else ("no effect", "device none: no offload")
        elif not on:
            status, note = "no effect", "device none: no offload"
        elif status == "refused":
            if value != default:
                raise ValueError(f"{reader.where}: {section}{k} {json.dumps(obj[k])} ({note}) is not modelled: "
                                 f"zerosim offloads whole buffers; leave it at {json.dumps(default)}")
            status = "no effect"
        elif status == "pinned":
            status, note = ("modelled", note) if value else ("not modelled", "pageable host buffers: DeepSpeed's "
                                                                              "copies are slower and synchronous")
        elif status == "not modelled" and value == default:
            status, note = "no effect", "DeepSpeed's default: " + note
        reader.report(section + k, obj[k], status, note)
    return device
