"""save(engine, DIR): one file per rank with what that rank owns, one manifest, then `latest`.

Under MPI each process writes its own rank's file (one writer per rank); rank 0 writes the manifest
once every file is complete and checksummed, and `latest` last. Every file is written under a
temporary name and renamed, so a save interrupted at any point leaves the checkpoint `latest` names
(the previous one) intact; the half-written folder has no manifest, and loading it is refused.

Between steps a rank owns no gradients worth saving: `engine.step` runs all K micro-steps of gradient
accumulation in one call, so a checkpoint never falls mid-accumulation.
"""

from __future__ import annotations

import json
import os

from zerosim.checkpoint.files import write_atomic, write_tensors
from zerosim.checkpoint.manifest import make_manifest, rank_file


def rank_tensors(rank) -> dict:
    """What one rank owns, by name: its 16-bit params, fp32 master and optimizer state (over its region)."""
    out = {"params": rank.params.array}
    if rank.master is not None:
        out["master"] = rank.master.array
    out.update({f"optim.{name}": buf.array for name, buf in rank.optim.items()})
    return out


def save(engine, directory: str, tag: str | None = None) -> str:
    """Save `engine`'s state under DIR/<tag> (default f"step{iteration:06d}": calls of `step`, which are the
    optimizer steps t unless the loss scaler skipped some) and point DIR/latest at it.

    Refuses, before writing anything, a tag that already exists. Returns the checkpoint's folder.
    Collective under MPI: every process calls it.
    """
    cluster = engine.cluster
    tag = f"step{engine.iteration:06d}" if tag is None else str(tag)
    if not tag or os.sep in tag or tag in (".", "..", "latest"):
        raise ValueError(f"a checkpoint tag is a plain folder name, got {tag!r}")
    folder = os.path.join(directory, tag)
    exists = f"{folder} already exists: pass another tag, or remove it" if os.path.exists(folder) else None
    cluster.agree([exists] * cluster.local_size, "; nothing was written")
    os.makedirs(folder, exist_ok=True)
    entries = []
    for rank in cluster.ranks:
        path = os.path.join(folder, rank_file(rank.index))
        formats, nbytes, digest = write_tensors(
            path, rank_tensors(rank), metadata={"rank": str(rank.index), "tag": tag}
        )
        entries.append(
            {"rank": rank.index, "file": rank_file(rank.index), "bytes": nbytes, "checksum": digest, "tensors": formats}
        )
    everyone = sorted(cluster.backend.all_meta(entries), key=lambda e: e["rank"])  # one per rank of the world
    if 0 in (rank.index for rank in cluster.ranks):
        manifest = make_manifest(engine, everyone)
        write_atomic(os.path.join(folder, "manifest.json"), lambda tmp: _write_json(tmp, manifest))
        write_atomic(os.path.join(directory, "latest"), lambda tmp: _write_text(tmp, tag + "\n"))
    cluster.backend.all_meta([None] * cluster.local_size)  # no rank returns before `latest` names the new checkpoint
    return folder


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
