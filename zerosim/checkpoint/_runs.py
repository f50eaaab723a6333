"""Whose checkpoints a folder holds: each manifest records its run, and a save into another run's folder is refused.

    DIR/<tag>/manifest.json   "run": {"id": "9c3e1f0a22b47d15"}

What makes two saves the same run (the issue's model, world, strategy, seed and data, step history): a run's id
is minted at its first save from everything that save records — the model, the layout on its ranks, the precision,
the optimizer and its state, every rank file's checksum (so the seed and the data it trained on) — and is passed on
only by resuming from one of its checkpoints (`load` registers the loaded engine under the manifest's id). So a
resumed run, resharded to another stage or rank count or not, saves on into its folder; a fresh run (another seed,
other data, another model) saving into it is refused before anything is written, naming both runs; the same
command run again from scratch reaches the same first checkpoint, bit for bit, and is the same run. The id is a
hash of bytes, not a clock or a random draw, so the same state still gives the same bytes in any process.

A folder's owner is the run of the checkpoint its `latest` names (or, with no usable `latest`, of its newest complete
tag): `latest` only ever names a complete tag of that run. `overwrite=True` (`zerosim train --overwrite`) hands the
folder to a new run: the other run's complete tag folders and `latest` are removed at this run's first save, before
it writes; other files in DIR (and files zerosim did not write inside a tag folder) are kept.

Manifests written before runs were recorded have no "run": their run is named by a hash of the model, precision and
optimizer ("unrecorded-..."), the same for every tag of such a folder, so resuming one and saving back still works.
"""

from __future__ import annotations

import json
import os
import re
import weakref

import xxhash

from zerosim.checkpoint._files import CheckpointError
from zerosim.checkpoint._folders import LATEST, MANIFEST, complete_tags, read_latest
from zerosim.outputs import open_input

_RANK_FILE = re.compile(r"rank\d{5}\.safetensors")  # the rank files a manifest lists (_manifest.py rank_file)
_RUNS = weakref.WeakKeyDictionary()  # engine -> its run id: set by its first save, or by the load that made it


def run_id_of(manifest: dict) -> str:
    """The run a manifest belongs to: its "run" id, or for a manifest from before runs were recorded a name derived
    from the model, the precision and the optimizer (the same for every tag of such a folder)."""
    run = manifest.get("run")
    if isinstance(run, dict) and isinstance(run.get("id"), str):
        return run["id"]
    settings = {k: manifest.get(k) for k in ("model", "precision", "accumulation_steps")}
    settings["optimizer"] = {k: v for k, v in (manifest.get("optimizer") or {}).items() if k != "step"}
    return "unrecorded-" + xxhash.xxh3_64_hexdigest(json.dumps(settings, sort_keys=True, default=str).encode())


def mint(manifest: dict) -> str:
    """A new run's id: a hash of everything its first save records (the manifest, without a run)."""
    return xxhash.xxh3_64_hexdigest(json.dumps({k: v for k, v in manifest.items() if k not in ("run", "checksums")},
                                               sort_keys=True, default=str).encode())


def registered(engine) -> str | None:
    return _RUNS.get(engine)


def register(engine, run_id: str) -> None:
    _RUNS[engine] = run_id


def owner(directory: str) -> tuple | None:
    """(run id, the manifests of its complete tags in DIR by tag) of the run that owns DIR, or None when DIR holds no
    complete checkpoint. The owner is the run of `latest`'s tag, else of the newest complete tag."""
    tags = complete_tags(directory)
    if not tags:
        return None
    try:
        named = read_latest(directory)
    except CheckpointError:
        named = None
    lead = named if named in tags else tags[-1]
    manifests = {t: _read(os.path.join(directory, t)) for t in tags}
    run = run_id_of(manifests[lead])
    return run, {t: m for t, m in manifests.items() if run_id_of(m) == run}


def describe(run: str, manifests: dict) -> str:
    """'run 9c3e1f0a22b47d15: MLP of 51 parameters, ZeRO-2 on 3 ranks, steps 1-2 (step000001, step000002)'."""
    if not manifests:
        return f"run {run}"
    last = manifests[max(manifests, key=lambda t: manifests[t].get("iteration", -1))]
    steps = sorted(m.get("iteration", -1) for m in manifests.values())
    span = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]} ({len(steps)} checkpoints)"
    return f"run {run}: {_what(last)}, {span}"


def describe_engine(run: str, manifest: dict) -> str:
    return f"run {run}: {_what(manifest)}, at step {manifest.get('iteration')}"


def check_owner(directory: str, run: str, manifest: dict, overwrite: bool) -> list:
    """Refuse (ValueError, before anything is written) a save of `run` into a DIR another run owns; with `overwrite`
    return the other run's tag folders to remove first. `manifest`: what this save records (its run described)."""
    found = owner(directory)
    if found is None or found[0] == run:
        return []
    other, theirs = found
    if overwrite:
        refuse_overwrite_through_link(directory)
    if not overwrite:
        raise ValueError(
            f"{directory} holds the checkpoints of another run ({describe(other, theirs)}); this is "
            f"{describe_engine(run, manifest)}. Nothing was written: save into another folder, resume that run to "
            "continue it (zerosim train --resume), or overwrite=True (zerosim train --overwrite) to remove its "
            "checkpoints and save this run's")
    return [os.path.join(directory, t) for t in complete_tags(directory)]


def refuse_overwrite_through_link(directory: str) -> None:
    """overwrite=True removes checkpoints only in a folder named as itself, never through a symbolic link to it."""
    if os.path.islink(directory.rstrip(os.sep) or directory):
        raise ValueError(f"{directory} is a symbolic link (to {os.readlink(directory.rstrip(os.sep))}) to another "
                         "run's checkpoints; overwrite (zerosim train --overwrite) never removes files through a "
                         "link: name the folder itself, or save into another folder. Nothing was written")


def remove_run(directory: str, folders: list) -> None:
    """Remove the other run's tag folders and `latest` (overwrite=True): only what zerosim wrote there — the
    manifest and the rank files it lists, each a regular file, never a link — and a tag folder then left empty."""
    latest = os.path.join(directory, LATEST)
    if os.path.isfile(latest) and not os.path.islink(latest):
        os.remove(latest)  # first: a kill from here on leaves no `latest` naming a half-removed tag
    for folder in folders:
        if os.path.islink(folder):  # complete_tags lists none: never followed
            continue
        listed = [e.get("file") for e in _read(folder).get("files", []) if isinstance(e, dict)]
        # the manifest first (the tag's commit, _folders.py): a kill from here on leaves an incomplete tag, skipped
        names = [MANIFEST] + [n for n in listed if isinstance(n, str) and _RANK_FILE.fullmatch(n)]
        for name in names:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                os.remove(path)
        if not os.listdir(folder):
            os.rmdir(folder)


def _read(folder: str) -> dict:
    try:
        with open_input(os.path.join(folder, MANIFEST)) as f:
            m = json.load(f)
        return m if isinstance(m, dict) else {}
    except (OSError, ValueError):
        return {}


def _what(m: dict) -> str:
    model = m.get("model") if isinstance(m.get("model"), dict) else {}
    mesh = m.get("mesh") if isinstance(m.get("mesh"), dict) else None
    where = (f"{mesh.get('strategy')} on {mesh.get('world_size')} ranks" if mesh else
             f"ZeRO-{m.get('stage')} on {m.get('world_size')} ranks")
    return f"{model.get('class', '?')} of {model.get('num_params', '?'):,} parameters, {where}" if isinstance(
        model.get("num_params"), int) else f"{model.get('class', '?')}, {where}"

