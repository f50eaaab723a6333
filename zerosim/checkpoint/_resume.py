"""What a resume continues: the saved run's settings, read from its manifest (no tensor is read).

The resume rule, one for the command line and for Python: what you leave out is what was saved — the
stage, the rank count, the precision policy, the optimizer with its hyperparameters, K micro-batches per
step; a stage or rank count you give reshards the saved state onto it (ZeroEngine.load(..., stage=...), or a
cluster of another size); a precision policy or an optimizer of another kind than the saved one is refused
(their states would not fit); a learning rate you give replaces the saved one. `zerosim train --resume`
and `TrainConfig(resume=...)` fill their unset options from `saved_settings`.
"""

from __future__ import annotations

import os

from zerosim.checkpoint._files import CheckpointError
from zerosim.checkpoint._folders import resolve
from zerosim.checkpoint._manifest import read_manifest


def _manifest(directory: str, tag: str | None = None) -> tuple:
    folder = resolve(directory, tag)
    return read_manifest(folder), os.path.join(folder, "manifest.json")


def saved_optimizer(directory: str, tag: str | None = None):
    """The optimizer the checkpoint was saved with: its kind and every hyperparameter."""
    from zerosim.optim import get_optimizer

    m, where = _manifest(directory, tag)
    saved = m["optimizer"]
    try:
        return get_optimizer(saved["name"], **{k: tuple(v) if isinstance(v, list) else v
                                               for k, v in saved["hyperparameters"].items()})
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: optimizer.hyperparameters do not make a {saved['name']} optimizer "
                              f"({e})") from None


def saved_data(directory: str, tag: str | None = None) -> dict:
    """What the saved run drew its micro-batches from: the manifest's "data" ({"seed", "batch", "task"} of
    `zerosim train`), or {} for a checkpoint that did not record it."""
    m, where = _manifest(directory, tag)
    data = m.get("data", {})
    if not isinstance(data, dict):
        raise CheckpointError(f"{where}: data must be an object (the run's seed, batch and task), got {data!r}")
    return data


def saved_settings(directory: str, tag: str | None = None) -> dict:
    """{"stage", "ranks", "precision", "optimizer", "lr", "accumulation_steps"} of the saved run."""
    from zerosim.checkpoint._load import policy_from_manifest

    m, where = _manifest(directory, tag)
    optimizer = saved_optimizer(directory, tag)
    try:
        policy = policy_from_manifest(m["precision"], where)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: precision does not describe a policy zerosim can run ({e})") from None
    ranks = m.get("mesh", {}).get("world_size", m["world_size"])  # a mesh run's N, not its S files (_replicas.py)
    return {"stage": m["stage"], "ranks": ranks, "precision": policy, "optimizer": optimizer.name,
            "lr": optimizer.lr, "accumulation_steps": m.get("accumulation_steps", 1)}
