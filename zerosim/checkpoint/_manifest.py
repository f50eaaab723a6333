"""The checkpoint's manifest: everything needed to check, inspect, resume and reshard a saved run.

    DIR/latest                     the tag of the newest complete checkpoint (written last, atomically)
    DIR/<tag>/manifest.json        this file's contents (below)
    DIR/<tag>/rank00000.safetensors   what rank 0 owned: its 16-bit params (whole or shard), fp32 master
    DIR/<tag>/rank00001.safetensors   and optimizer state over its region, ...

The layout follows DeepSpeed's (a folder per tag, a `latest` file naming the newest: deepspeed/runtime/
engine.py, `save_checkpoint` / `load_checkpoint`), so an interrupted save never touches the checkpoint
`latest` names. Manifest fields: format and version; the model (class, parameter count, every layer's
window and every parameter's name and shape — a checkpoint of another model is refused); stage and
world size; the layout (its kind: zerosim's flat shards, or DeepSpeed ZeRO-3's per-parameter chunks with
each parameter's chunk size; FSDP2's dim-0 chunks; P, s, padded length, padding, each rank's region); the precision
policy
(its fields: compute, master, reduce, loss scale and its options, unscaling, the gradient recipe, the
all-reduce's chunk map, rounding, seed, grad_accum); the optimizer (name, hyperparameters) and its step
t, and the iterations run (skipped steps count there, not in t); the loss scaler's state (its
`state_dict`: a dynamic scaler's current scale and counters, so a resumed run scales as the
uninterrupted one would); the stochastic-rounding counter (draws are a hash of (seed, step, element),
so the seed and t resume them);
and one entry per rank file: name, bytes, XXH3-64 checksum, and each tensor's format. A strategy for many
nodes adds "mesh": its name, shard group S, replicas R, ranks N, GPUs per node and the ranks that wrote; with
replicas (HSDP, MiCS) world_size is then S, the shards written once each (_replicas.py). "run": the id of the run
the checkpoint belongs to (_runs.py: whose the folder is). "data": what a `zerosim train` run drew its micro-batches
from (its seed, batch and task), so a resume on other data is refused (train/_trainer.py).

The manifest is checksummed like the rank files (format version 2): "checksums" holds the XXH3-64 of every value,
by its dotted key ("optimizer.hyperparameters.betas"), so a hand edit of any value — betas, a precision field, the
step — is refused naming the file and the key, before anything is loaded. Version 1 manifests (written before) have
no checksums and are read as they were.
"""

from __future__ import annotations

import dataclasses
import json
import os

import xxhash

from zerosim.checkpoint._files import CheckpointError
from zerosim.checkpoint._manifest_checks import check_manifest
from zerosim.checkpoint._replicas import mesh_spec
from zerosim.outputs import open_input
from zerosim.parallel.data.layouts import from_description

FORMAT, VERSION = "zerosim-checkpoint", 2
READS = (1, 2)  # version 1: no "checksums" (read as before); 2: every value checksummed


def rank_file(rank: int) -> str:
    return f"rank{rank:05d}.safetensors"


def model_spec(model) -> dict:
    """The model as the manifest records it: enough to refuse a checkpoint of another model."""
    return {
        "class": type(model).__name__,
        "num_params": int(model.num_params),
        "layers": [[layer.name, *model.layer_window(i), type(layer).__name__] for i, layer in enumerate(model.layers)],
        "params": [[s.layer, s.name, list(s.shape)] for s in model.specs],
    }


def optimizer_spec(optimizer) -> dict:
    hyper = {f.name: getattr(optimizer, f.name) for f in dataclasses.fields(optimizer)}
    return {
        "name": optimizer.name,
        "hyperparameters": {k: list(v) if isinstance(v, tuple) else v for k, v in hyper.items()},
    }


def make_manifest(engine, files: list, run: str | None = None, data: dict | None = None) -> dict:
    layout = engine.layout
    p = engine.precision.with_(reduction=engine.recipe.reduction, allreduce=engine.recipe.allreduce)  # the recipe too
    regions = [engine.region(r) for r in range(layout.world_size)]
    manifest = {
        "format": FORMAT, "version": VERSION,
        "model": model_spec(engine.model),
        "stage": engine.stage_number, "world_size": layout.world_size,
        "layout": {**layout.describe(), "regions": [[r.start, r.stop] for r in regions]},
        "precision": dataclasses.asdict(p),
        "optimizer": {**optimizer_spec(engine.optimizer), "step": engine.t},
        "iteration": engine.iteration,
        "accumulation_steps": engine.accumulation_steps,
        "loss_scaler": engine.scaler.state_dict(),
        "stochastic_rounding": {"seed": p.seed, "next_step": engine.t + 1},
        "files": files,
    }
    mesh = mesh_spec(engine)
    if mesh is not None:  # a strategy for many nodes: what it was, on which mesh, and who wrote (_replicas.py)
        manifest["mesh"] = mesh
    if run is not None:  # the run these checkpoints belong to (runs.py)
        manifest["run"] = {"id": run}
    if data is not None:  # what the run drew its micro-batches from (train/_trainer.py)
        manifest["data"] = dict(data)
    return seal(manifest)


def seal(manifest: dict) -> dict:
    """`manifest` with "checksums": the XXH3-64 of each value's JSON, by dotted key (dicts walked, lists whole)."""
    body = json.loads(json.dumps({k: v for k, v in manifest.items() if k != "checksums"}))  # as read back
    return {**body, "checksums": dict(_digests(body))}


def _digests(value, prefix: str = ""):
    for key, v in value.items():
        name = f"{prefix}{key}"
        if isinstance(v, dict) and v:
            yield from _digests(v, name + ".")
        else:
            yield name, xxhash.xxh3_64_hexdigest(json.dumps(v, sort_keys=True, separators=(",", ":")).encode())


def check_seal(m: dict, path: str) -> None:
    """Refuse a version-2 manifest whose values are not the ones its save checksummed, naming the key."""
    if m.get("version") == 1:
        return
    saved = m.get("checksums")
    if not isinstance(saved, dict):
        raise CheckpointError(f"{path}: no checksums (format version 2 records one for every value): the manifest "
                              "was edited or cut short; nothing was loaded")
    now = dict(_digests({k: v for k, v in m.items() if k != "checksums"}))
    changed = [k for k in now if saved.get(k) != now[k]] + [k for k in saved if k not in now]
    if changed:
        more = f" (and {len(changed) - 1} other key(s))" if len(changed) > 1 else ""
        raise CheckpointError(f"{path}: {changed[0]}{more} is not what the save wrote (its checksum in the manifest "
                              "differs): the manifest was edited or corrupted; nothing was loaded")


def read_manifest(folder: str) -> dict:
    """The manifest of the checkpoint in `folder`, checked for format and version."""
    path = os.path.join(folder, "manifest.json")
    try:
        with open_input(path) as f:  # a FIFO would block the read for ever: refused (a ValueError, below)
            m = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no manifest — not a zerosim checkpoint, or its save never finished") from None
    except (OSError, ValueError) as e:  # ValueError: not JSON, or not UTF-8 text
        raise CheckpointError(f"{path}: unreadable manifest ({type(e).__name__}: {e})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a zerosim checkpoint manifest (format "
                              f"{m.get('format') if isinstance(m, dict) else None!r})")
    if m.get("version") not in READS:
        raise CheckpointError(f"{path}: checkpoint format version {m.get('version')!r}; this zerosim reads versions "
                              f"{' and '.join(map(str, READS))}")
    check_seal(m, path)  # any value edited since the save, named (format version 2)
    check_manifest(m, path)  # every key a load reads, and their agreement (_manifest_checks.py)
    return m


def check_model(manifest: dict, model, path: str) -> None:
    """Refuse a checkpoint of another model, naming the first difference."""
    saved, here = manifest["model"], model_spec(model)
    for key in ("num_params", "layers", "params"):
        if saved[key] != here[key]:
            what = {
                "num_params": "parameter count",
                "layers": "layers (names, windows and kinds)",
                "params": "parameter shapes",
            }[key]
            a, b = (saved[key], here[key]) if key == "num_params" else (_first_diff(saved[key], here[key]))
            raise CheckpointError(f"{path}: saved from another model: its {what} {a}, this model's {b}")


def _first_diff(a: list, b: list) -> tuple:
    for x, y in zip(a, b):
        if x != y:
            return x, y
    return f"{len(a)} entries", f"{len(b)} entries"


def saved_layout(manifest: dict):
    """The layout the checkpoint was saved in (parallel/data/layouts/_choose.py reads the layout's own description
    back)."""
    windows = tuple((a, b) for _, a, b, _ in manifest["model"]["layers"])
    shapes = [shape for _, _, shape in manifest["model"]["params"]]
    return from_description(manifest["layout"], manifest["world_size"], windows, shapes)
