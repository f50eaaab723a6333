"""save(engine, DIR): one file per rank with what that rank owns, one manifest, then `latest`.

Under MPI each process writes its own rank's file (one writer per rank); rank 0 writes the manifest
once every file is complete and checksummed, and `latest` last. Every file is written under a
temporary name and renamed, so a save interrupted at any point leaves the checkpoint `latest` names
(the previous one) intact; the half-written folder has no manifest and is not a checkpoint (_folders.py).

Saving into a tag that exists:
    no manifest (a save of it was killed)   cleaned and written anew, as torch DCP overwrites a folder
                                            without `.metadata` (_folders.py)
    a complete checkpoint of this state     nothing to write: `latest` is pointed at it (a resumed run that
                                            re-trains a step whose save was killed after its manifest)
    a complete checkpoint of another state  refused, once, before anything is written: nothing a user does
                                            loses a checkpoint (DeepSpeed and torch DCP would overwrite it)
Saving into a folder another run's checkpoints are in is refused the same way, naming both runs (_runs.py).
The same state gives the same bytes (files.serialize), so "this state" is decided by comparing manifests:
every rank file's size and checksum, and everything else the manifest records.

Between steps a rank owns no gradients worth saving: `engine.step` runs all K micro-steps of gradient
accumulation in one call, so a checkpoint never falls mid-accumulation.
"""

from __future__ import annotations

import json
import os

from zerosim.checkpoint import _runs as runs
from zerosim.checkpoint._files import checksum, tensor_bytes, write_atomic, write_bytes
from zerosim.checkpoint._folders import (
    LATEST,
    MANIFEST,
    check_tag,
    clean_incomplete,
    is_complete,
    read_latest,
    save_lock,
)
from zerosim.checkpoint._manifest import make_manifest, rank_file
from zerosim.checkpoint._replicas import check_replicas, file_index, writers
from zerosim.checkpoint._runs import mint, register, registered
from zerosim.outputs import check_folder, refuse_inside_checkpoint


def rank_tensors(rank) -> dict:
    """What one rank owns, by name: its 16-bit params, fp32 master and optimizer state (over its region)."""
    out = {"params": rank.params.array}
    if rank.master is not None:
        out["master"] = rank.master.array
    out.update({f"optim.{name}": buf.array for name, buf in rank.optim.items()})
    return out


def save(engine, directory: str, tag: str | None = None, overwrite: bool = False, data: dict | None = None) -> str:
    """Save `engine`'s state under DIR/<tag> (default f"step{iteration:06d}": calls of `step`, which are the
    optimizer steps t unless the loss scaler skipped some) and point DIR/latest at it.

    A tag folder a killed save left incomplete is cleaned and reused; a complete one holding this very state
    is kept as it is; one holding another state is refused before anything is written. DIR belongs to one run
    (_runs.py): a save into a folder another run's checkpoints are in is refused before anything is written, naming
    both runs — with `overwrite=True` that run's tag folders and `latest` are removed first. DIR may not lie inside
    another checkpoint, nor be a tag folder itself (zerosim/outputs.py). Returns the checkpoint's folder. Collective
    under MPI: every process calls it.

    With replicas (HSDP, MiCS) each shard is written once, by replica 0, after the replicas are checked to hold
    equal bits (_replicas.py); a disagreement is refused before anything is written. `data`: what the run drew its
    micro-batches from ({"seed", "batch", "task"}, `zerosim train`'s), recorded so that a resume on other data is
    refused; one save in DIR at a time (a second process's save waits for the first: _folders.py save_lock).
    """
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be True or False, got {overwrite!r}")
    if tag is not None and not isinstance(tag, str):  # str(1.5) or str([]) would name a folder the caller never did
        raise TypeError(f"tag must be a folder name (a str) or None, got {tag!r}")
    if data is not None and not isinstance(data, dict):
        raise TypeError(f"data must be a dict (what the run trains on) or None, got {data!r}")
    writer = 0 in (rank.index for rank in engine.cluster.ranks)
    if not writer or _directory_problem(directory) is not None:  # the checks below say why, before anything
        return _save(engine, directory, tag, overwrite, data)
    os.makedirs(directory, exist_ok=True)
    with save_lock(directory):  # one save into DIR at a time (_folders.py)
        return _save(engine, directory, tag, overwrite, data)


def _save(engine, directory: str, tag: str | None, overwrite: bool, data: dict | None) -> str:
    cluster, backend = engine.cluster, engine.cluster.backend
    tag = check_tag(f"step{engine.iteration:06d}" if tag is None else str(tag))
    check_replicas(engine, rank_tensors)  # before any file is touched
    folder = os.path.join(directory, tag)
    writer = 0 in (rank.index for rank in cluster.ranks)  # the process of rank 0 writes the manifest and `latest`

    def decided(value):  # rank 0's process decides; every process gets its answer (one message, not one per rank)
        return backend.all_meta([value if writer else None] * cluster.local_size)[0]

    found = decided(_found(directory, folder) if writer else None)
    if found not in ("absent", "complete"):
        raise ValueError(found)
    run, entries = registered(engine), None
    owned = decided(runs.owner(directory) is not None if writer else None)
    if run is None and (owned or found == "complete"):  # a new run's id comes from what it saves: made before writing
        entries = _encoded(engine, tag)
        run = mint(make_manifest(engine, entries, data=data))
    others = decided(_others(directory, run, make_manifest(engine, entries or [], run, data), overwrite)
                     if writer and owned else [])
    if isinstance(others, str):
        raise ValueError(others)
    if folder in others:  # overwrite=True: the other run's tag of this name goes before this one is written
        found = "absent"
    if found == "complete":  # is it this very state? Compare manifests: every file's checksum, and the rest
        entries = entries or _encoded(engine, tag)
        manifest = make_manifest(engine, entries, run, data)
        same = decided(_holds(folder, manifest) if writer else None)
        if same is not True:
            raise ValueError(same)
        if writer:
            clean_incomplete(directory, None)  # a `latest` a killed save left half written under its temporary name
            if read_latest(directory) != tag:
                write_atomic(os.path.join(directory, LATEST), lambda tmp: _write_text(tmp, tag + "\n"))
        backend.all_meta([None] * cluster.local_size)
        register(engine, run)
        return folder
    if writer:
        if others:  # overwrite=True: the other run's checkpoints go (_runs.py)
            runs.remove_run(directory, others)
        clean_incomplete(directory, folder)  # what a killed save of this tag left, before anyone writes again
        os.makedirs(folder, exist_ok=True)
    backend.all_meta([None] * cluster.local_size)  # the folder is clean and exists before any rank writes
    entries = []
    for r, tensors, metadata in _states(engine, tag):  # one rank's bytes at a time: made, hashed, written, let go
        if tensors is None:  # a replica: its shard is written by replica 0
            entries.append(None)
            continue
        formats, payload = tensor_bytes(tensors, metadata)
        write_atomic(os.path.join(folder, rank_file(r)), lambda tmp: write_bytes(tmp, payload))
        entries.append(_entry(r, (formats, payload)))
    entries = _gathered(backend, entries)  # every file in place
    run = run or mint(make_manifest(engine, entries, data=data))
    manifest = make_manifest(engine, entries, run, data)
    if writer:
        write_atomic(os.path.join(folder, MANIFEST), lambda tmp: _write_json(tmp, manifest))
        write_atomic(os.path.join(directory, LATEST), lambda tmp: _write_text(tmp, tag + "\n"))
    backend.all_meta([None] * cluster.local_size)  # no rank returns before `latest` names the new checkpoint
    register(engine, run)
    return folder


def check_save(engine, directory: str, overwrite: bool = False) -> None:
    """What `save(engine, DIR, overwrite=overwrite)` would refuse about DIR, refused now, before a run's work: a place
    that cannot hold checkpoints (zerosim/outputs.py), or a folder another run owns — for an engine no save or load
    has given a run yet (a new run) any run's folder, since a new run's id is only known at its first save
    (_runs.py)."""
    cluster, backend = engine.cluster, engine.cluster.backend
    writer = 0 in (rank.index for rank in cluster.ranks)
    problem = None
    if writer:
        problem = _directory_problem(directory)
        found, run = (runs.owner(directory) if problem is None else None), registered(engine)
        if problem is None and found is not None and found[0] != run and overwrite:
            try:
                runs.refuse_overwrite_through_link(directory)
            except ValueError as e:
                problem = str(e)
        if problem is None and found is not None and found[0] != run and not overwrite:
            this = f"run {run}, resumed from elsewhere" if run else "a new run (not resumed from one of them)"
            problem = (f"{directory} holds the checkpoints of another run ({runs.describe(*found)}); this is {this}. "
                       "Nothing was written: save into another folder, resume that run to continue it (zerosim train "
                       "--resume), or overwrite=True (zerosim train --overwrite) to remove its checkpoints at this "
                       "run's first save")
    problem = backend.all_meta([problem] * cluster.local_size)[0]
    if problem is not None:
        raise ValueError(problem)


def _encoded(engine, tag: str) -> list:
    """Every process's file entries (sizes, checksums, formats) of this state, made in memory, nothing written."""
    return _gathered(engine.cluster.backend, [None if t is None else _entry(r, tensor_bytes(t, metadata))
                                              for r, t, metadata in _states(engine, tag)])


def _others(directory: str, run: str, manifest: dict, overwrite: bool):
    """The other run's folders to remove (overwrite), [] when DIR is this run's, or the refusal's words."""
    try:
        return runs.check_owner(directory, run, manifest, overwrite)
    except ValueError as e:
        return str(e)


def _states(engine, tag: str):
    """(file index, its tensors, its file's metadata) for each local rank; (rank, None, None) for a rank that writes
    nothing (_replicas.py: every rank writes, or replica 0 of each shard)."""
    write = writers(engine)
    for rank in engine.cluster.ranks:
        if rank.index not in write:
            yield rank.index, None, None
            continue
        i = file_index(engine, rank.index)
        yield i, rank_tensors(rank), {"rank": str(i), "tag": tag}


def _gathered(backend, entries: list) -> list:
    """Every process's file entries (one item per local rank, None for a replica that writes none), in file order."""
    return sorted((e for e in backend.all_meta(entries) if e is not None), key=lambda e: e["rank"])


def _entry(rank: int, encoded: tuple) -> dict:
    formats, data = encoded
    return {"rank": rank, "file": rank_file(rank), "bytes": len(data), "checksum": checksum(data), "tensors": formats}


def _found(directory: str, folder: str) -> str:
    """What is at the tag's place: "absent" (nothing, or a folder a killed save left without its manifest: reused),
    "complete" (a checkpoint), or the reason to refuse."""
    problem = _directory_problem(directory)
    if problem is not None:
        return problem
    if os.path.islink(folder):
        return (f"{folder}: a symbolic link (to {os.readlink(folder)}) where this checkpoint's tag folder goes; "
                "zerosim never writes or removes through a link in a checkpoint folder: remove the link or save into "
                "another folder; nothing was written")
    if not os.path.exists(folder):
        return "absent"
    if not os.path.isdir(folder):
        return f"{folder}: a file is in the way of the checkpoint folder; nothing was written"
    return "complete" if is_complete(folder) else "absent"


def _directory_problem(directory: str) -> str | None:
    """Why DIR cannot hold checkpoints (inside another checkpoint; a file; a tag folder itself; not writable)."""
    try:
        refuse_inside_checkpoint(directory, "", include_self=False)
    except ValueError as e:
        return f"{e}; nothing was written"
    if os.path.exists(directory) and not os.path.isdir(directory):
        return f"{directory}: a file, not a folder to save checkpoints into; nothing was written"
    links = _checkpoint_links(directory)
    if links:
        return (f"{links[0]}: a symbolic link (to {os.readlink(links[0])}) to a checkpoint, in the folder this run "
                "saves into; zerosim never writes or removes through a link there: remove it or save into another "
                "folder; nothing was written")
    try:
        check_folder(directory, checkpoint_ok=True)
    except ValueError as e:
        return f"{e}; nothing was written"
    return None


def _checkpoint_links(directory: str) -> list:
    """The symbolic links in DIR that a save could reach through: `latest`, and links to a checkpoint's tag folder
    (zerosim writes no link there: someone made them, maybe into another run's checkpoints)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    out = []
    for name in names:
        path = os.path.join(directory, name)
        if os.path.islink(path) and (name == LATEST or os.path.isfile(os.path.join(path, MANIFEST))):
            out.append(path)
    return out


def _holds(folder: str, manifest: dict):
    """True when the complete checkpoint in `folder` is this state (its manifest is this one), else the refusal."""
    try:
        with open(os.path.join(folder, MANIFEST)) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        saved = None
    if saved == json.loads(json.dumps(manifest)):
        return True
    at = f" (iteration {saved.get('iteration')})" if isinstance(saved, dict) else ""
    return (f"{folder} already holds another checkpoint{at}; nothing was written: save under another tag or "
            f"folder, or remove it")


def _write_json(path: str, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def _write_text(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
