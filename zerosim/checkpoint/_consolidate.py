"""One unsharded fp32 file from a sharded checkpoint (DeepSpeed's `zero_to_fp32` analogue), and `inspect`.

`consolidate(DIR, OUT)` writes the fp32 master weights — or, without a master, the 16-bit weights
widened — and the optimizer state, padding removed, one tensor per parameter named by its layer
(`fc0.w`, `fc0.w.optim.m`, ...), shaped as the model holds it. `inspect(DIR)` says who owns which
range of the flat vector, where the padding is, and how many bytes each file holds: exactly what
`zero_to_fp32` users debug when offsets and padding disagree.
"""

from __future__ import annotations

import math
import os

import numpy as np

from zerosim.checkpoint._files import write_tensors
from zerosim.checkpoint._folders import LATEST, resolve
from zerosim.checkpoint._load import read_state
from zerosim.checkpoint._manifest import saved_layout
from zerosim.outputs import check_file


def consolidated(directory: str, tag: str | None = None) -> dict:
    """{name: array}: every parameter's fp32 weights and optimizer state, named by layer, unpadded."""
    return consolidated_state(read_state(directory, tag=tag))


def consolidated_state(state) -> dict:
    """`consolidated` of a checkpoint already read and checked (a `SavedState`)."""
    weights = state.master if state.master is not None else state.params.astype(np.float32)
    out = {}
    for layer_index, name, shape in state.manifest["model"]["params"]:
        layer_name = state.manifest["model"]["layers"][layer_index][0]
        start = _offset(state.manifest, layer_index, name)
        size = math.prod(shape)
        key = f"{layer_name}.{name}"
        out[key] = weights[start : start + size].reshape(shape)
        for k, v in state.optimizer.items():
            out[f"{key}.optim.{k}"] = v[start : start + size].reshape(shape)
    return out


def _offset(manifest: dict, layer: int, name: str) -> int:
    """A parameter's offset in the flat vector: its layer's window start plus the sizes of the ones before it."""
    start = manifest["model"]["layers"][layer][1]
    for li, n, shape in manifest["model"]["params"]:
        if li == layer:
            if n == name:
                return start
            start += math.prod(shape)
    raise KeyError(f"no parameter {name!r} in layer {layer}")


def consolidate(directory: str, out: str, tag: str | None = None) -> dict:
    """Write `consolidated(DIR)` to the safetensors file `out` (atomically); returns what it wrote.

    `out` may not lie inside the checkpoint — DIR, the tag folder read, or the folder of tags whose `latest`
    names it — nor be a folder, a link or no path at all: refused before anything is read or written."""
    folder = resolve(directory, tag)
    roots = [directory, folder]
    parent = os.path.dirname(os.path.abspath(folder))
    if os.path.isfile(os.path.join(parent, LATEST)):  # DIR given as a tag folder: its siblings and `latest` too
        roots.append(parent)
    check_file(out)  # a path; no link, folder or other checkpoint; a folder that can be written (zerosim/outputs.py)
    check_outside(out, roots)
    state = read_state(folder)
    tensors = consolidated_state(state)
    m = state.manifest
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    write_tensors(out, {k: np.ascontiguousarray(v) for k, v in tensors.items()},
                  metadata={"optimizer": m["optimizer"]["name"], "step": str(m["optimizer"]["step"]),
                            "saved_stage": str(m["stage"]), "saved_world_size": str(m["world_size"])})
    return tensors


def check_outside(out: str, roots: list) -> None:
    """Refuse an output path inside any of `roots` (the checkpoint's folders) or equal to one (its folders' links
    followed: `out` itself is no link, check_file refused one)."""
    target = os.path.realpath(out)
    for root in roots:
        inside = os.path.realpath(root)
        if target == inside or target.startswith(inside.rstrip(os.sep) + os.sep):
            raise ValueError(f"{out}: inside the checkpoint {root}; writing there would overwrite or add to its "
                             "files: write the consolidated file outside it")


def inspect(directory: str, tag: str | None = None) -> str:
    """The layout as text: per rank file, its bytes and the flat range it owns, padding, and whose params."""
    state = read_state(directory, tag=tag)
    m = state.manifest
    P, lay = m["layout"]["num_params"], m["layout"]
    if lay.get("kind", "flat") == "per-parameter":
        return _with_mesh(m, _inspect_per_parameter(state))
    lines = [f"{state.folder}: ZeRO stage {m['stage']}, {m['world_size']} ranks, {P:,} parameters, step "
             f"{m['optimizer']['step']}",
             f"flat layout: shard size s = {lay['shard_size']:,}, padded length {lay['padded']:,} "
             f"({_padding_words(lay['padding'])}" + (f" at the end, [{P:,}, {lay['padded']:,}))" if lay['padding']
                                                      else ": the shards split the parameters evenly)"), ""]
    for entry, (start, stop) in zip(m["files"], lay["regions"]):
        real = max(0, min(stop, P) - start)
        pad = (stop - start) - real
        names = _params_in(m, start, min(stop, P))
        lines.append(f"{entry['file']}: {entry['bytes']:,} bytes; owns [{start:,}, {stop:,}): {real:,} real"
                     + (f" + {pad:,} padding" if pad else "") + f"; {', '.join(names) if names else 'no parameters'}")
        lines.append("    " + ", ".join(f"{k} ({fmt})" for k, fmt in entry["tensors"].items()))
    return _with_mesh(m, "\n".join(lines))


def _padding_words(count: int) -> str:
    """"no padding", "1 padding element", "3 padding elements"."""
    return "no padding" if not count else f"{count:,} padding element" + ("s" if count > 1 else "")


def _with_mesh(manifest: dict, text: str) -> str:
    """`text` with, under its first line, the strategy's mesh when the manifest records one (_replicas.py)."""
    mesh = manifest.get("mesh")
    if not mesh:
        return text
    first, rest = text.split("\n", 1)
    files = len(manifest["files"])
    line = (f"strategy {mesh['strategy']} on {mesh['world_size']} ranks ({mesh['gpus_per_node']} per node), "
            f"shard_group {mesh['shard_group']}, {mesh['replicas']} replica(s): "
            + (f"each shard written once, {files} files by ranks {mesh['writers']}" if mesh["replicas"] > 1
               else f"{files} files, one per rank"))
    return f"{first}\n{line}\n{rest}"


def _params_in(manifest: dict, start: int, stop: int) -> list:
    """Names of the parameters overlapping [start, stop), with the part held when it straddles shards."""
    out = []
    for layer_index, name, shape in manifest["model"]["params"]:
        a = _offset(manifest, layer_index, name)
        b = a + math.prod(shape)
        lo, hi = max(a, start), min(b, stop)
        if lo < hi:
            label = f"{manifest['model']['layers'][layer_index][0]}.{name}"
            out.append(label if (lo, hi) == (a, b) else f"{label}[{lo - a}:{hi - a}]")
    return out


def _inspect_per_parameter(state) -> str:
    """`inspect` for DeepSpeed ZeRO-3's layout: each rank's chunk of every parameter, with its padding."""
    m = state.manifest
    layout, lay, n = saved_layout(m), m["layout"], m["world_size"]
    names = [f"{m['model']['layers'][li][0]}.{name}" for li, name, _ in m["model"]["params"]]
    lines = [f"{state.folder}: ZeRO stage {m['stage']}, {n} ranks, {layout.num_params:,} parameters, step "
             f"{m['optimizer']['step']}",
             (f"per-parameter layout (DeepSpeed ZeRO-3): each parameter of n elements cut in {n} chunks of "
              f"ceil(n/{n}), "
              if layout.split == "elements" else
              f"per-parameter layout (FSDP2, Shard(0)): each parameter cut on dim 0 in {n} chunks of ceil(rows/{n}) "
              "rows, ")
             + f"the last padded; rank r's shard is the r-th chunk of every parameter, in model order: shard size "
             f"s = {layout.shard_size:,}, padded length {layout.padded:,} ({_padding_words(lay['padding'])})", ""]
    for entry in m["files"]:
        r = entry["rank"]
        held = []
        for name, (q, first, count), c, o in zip(
            names, layout.draw_index(layout.own(r)), layout.chunks, layout.offsets
        ):
            part = f"{name}[{first - o}:{first - o + count}]" if count else f"{name}[none]"
            held.append(part + (f" + {c - count} padding" if c > count else ""))
        real = sum(x[2] for x in layout.draw_index(layout.own(r)))
        pad = layout.shard_size - real
        lines.append(f"{entry['file']}: {entry['bytes']:,} bytes; {real:,} real"
                     + (f" + {pad:,} padding" if pad else "") + "; " + ", ".join(held))
        lines.append("    " + ", ".join(f"{k} ({fmt})" for k, fmt in entry["tensors"].items()))
    return "\n".join(lines)
