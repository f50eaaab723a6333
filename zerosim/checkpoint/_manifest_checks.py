"""Is a manifest whole and consistent? Every key a load reads, checked before anything is read or built.

A hand-edited or damaged manifest is refused with a CheckpointError naming the file and the key
("ckpt/step000003/manifest.json: optimizer.step must be an integer >= 0, got -5"), never a KeyError
or a failure deep inside a load. What can be derived is derived and compared: the layout's shard size,
padding and every rank's region follow from the model, the stage and the world size, so an edited stage
or world size is caught by the fields it no longer fits; the optimizer's step t, the iteration count
(skipped steps included, so never below t) and the stochastic-rounding counter (t + 1) must agree; every
rank file is listed once, in rank order, with the tensors the policy and the optimizer keep.
"""

from __future__ import annotations

import math
import re

from zerosim.checkpoint._files import CHECKSUMS, CheckpointError

_FILE = re.compile(r"rank\d{5}\.safetensors$")
_RUN = re.compile(r"[0-9a-z-]{1,64}$")


class _Checker:
    def __init__(self, manifest: dict, path: str):
        self.m, self.path = manifest, path

    def fail(self, key: str, what: str):
        raise CheckpointError(f"{self.path}: {key} {what}")

    def get(self, key: str, kind=None, default=...):
        """The value at dotted `key` ("optimizer.step"), of type `kind`; missing keys named."""
        node = self.m
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                if default is not ...:
                    return default
                self.fail(key, "is missing: the manifest is incomplete or was edited by hand")
            node = node[part]
        if kind is not None and not _is(node, kind):
            self.fail(key, f"must be {_KIND_WORDS[kind]}, got {node!r}")
        return node

    def count(self, key: str, minimum: int, default=...) -> int:
        value = self.get(key, int, default)
        if value < minimum:
            self.fail(key, f"must be an integer >= {minimum}, got {value!r}")
        return value


_KIND_WORDS = {int: "an integer", str: "a string", dict: "a JSON object", list: "a list"}


def _is(value, kind) -> bool:
    if kind is int:
        return type(value) is int  # not a bool, not a float
    return isinstance(value, kind)


def check_manifest(m: dict, path: str) -> None:
    """Refuse (CheckpointError naming `path` and the key) a manifest that is missing a key, holds a value of the
    wrong kind, or whose fields disagree with each other."""
    from zerosim.optim import OPTIMIZERS
    from zerosim.parallel.data import check_stage

    c = _Checker(m, path)
    _check_model(c)
    stage = c.get("stage", int)
    try:
        check_stage(stage)
    except ValueError as e:
        c.fail("stage", str(e).removeprefix("stage "))
    n = c.count("world_size", 1)
    _check_layout(c, stage, n)
    c.get("precision", dict)
    name = c.get("optimizer.name", str)
    if name not in OPTIMIZERS:
        c.fail("optimizer.name", f"names no optimizer zerosim has ({', '.join(OPTIMIZERS)}), got {name!r}")
    c.get("optimizer.hyperparameters", dict)
    t = c.count("optimizer.step", 0)
    iteration = c.count("iteration", 0, default=t)
    if iteration < t:
        c.fail("iteration", f"is {iteration}, below optimizer.step {t}: every optimizer step is an iteration")
    c.count("accumulation_steps", 1, default=1)
    c.get("loss_scaler", dict, default={})
    next_step = c.get("stochastic_rounding.next_step", int, default=t + 1)
    if next_step != t + 1:
        c.fail("stochastic_rounding.next_step", f"is {next_step}; it must be optimizer.step + 1 = {t + 1}")
    _check_mesh(c, stage, n)
    _check_files(c, n)
    if "run" in m:  # runs.py: whose checkpoints these are
        run = c.get("run.id", str)
        if not _RUN.match(run):
            c.fail("run.id", f"must be a run id (letters, digits and '-', at most 64), got {run!r}")


def _check_mesh(c: _Checker, stage: int, n: int) -> None:
    """A strategy's mesh (_replicas.py): a known strategy of this stage; S dividing the N ranks; R = N / S replicas
    for a strategy sharded over shard groups, whose S files are then the world_size, else 1 replica and N files."""
    from zerosim.parallel.data import STRATEGIES

    if "mesh" not in c.m:
        return
    name = c.get("mesh.strategy", str)
    if name not in STRATEGIES or STRATEGIES[name].stage != stage:
        c.fail("mesh.strategy", f"must be a strategy of stage {stage} ({', '.join(STRATEGIES)}), got {name!r}")
    plan, ranks = STRATEGIES[name], c.count("mesh.world_size", 1)
    size = c.get("mesh.shard_group")
    if size is not None and not (_is(size, int) and size >= 1 and ranks % size == 0):
        c.fail("mesh.shard_group", f"must be null or a positive integer dividing mesh.world_size {ranks}, got {size!r}")
    if (size is None) == plan.uses_groups:
        c.fail("mesh.shard_group", f"is {size!r}; {name} " + ("needs one" if plan.uses_groups else "takes none"))
    replicas = ranks // size if plan.sharded_over == "shard" else 1
    if c.get("mesh.replicas", int) != replicas:
        c.fail("mesh.replicas", f"is {c.get('mesh.replicas')}; {name} with shard_group {size} on {ranks} ranks has "
               f"{replicas}")
    files = size if replicas > 1 or plan.sharded_over == "shard" else ranks
    if n != files:
        c.fail("world_size", f"is {n}, but {name} on {ranks} ranks writes {files} file(s), one per shard")


def _check_model(c: _Checker) -> None:
    c.get("model", dict)
    c.get("model.class", str)
    p = c.count("model.num_params", 1)
    layers, params = c.get("model.layers", list), c.get("model.params", list)
    for i, layer in enumerate(layers):
        if not (isinstance(layer, list) and len(layer) == 4 and isinstance(layer[0], str) and _is(layer[1], int)
                and _is(layer[2], int) and 0 <= layer[1] <= layer[2] <= p):
            c.fail(f"model.layers[{i}]", f"must be [name, start, stop, kind] with 0 <= start <= stop <= {p}, "
                   f"got {layer!r}")
    total = 0
    for i, spec in enumerate(params):
        if not (isinstance(spec, list) and len(spec) == 3 and _is(spec[0], int) and 0 <= spec[0] < len(layers)
                and isinstance(spec[1], str) and isinstance(spec[2], list)
                and all(_is(d, int) and d >= 0 for d in spec[2])):
            c.fail(f"model.params[{i}]", f"must be [layer index, name, shape], got {spec!r}")
        total += math.prod(spec[2])
    if total != p:
        c.fail("model.num_params", f"is {p}, but the parameters' shapes hold {total}")


def _check_layout(c: _Checker, stage: int, n: int) -> None:
    """The layout's fields must be the ones the model, the stage and the world size give."""
    from zerosim.checkpoint._manifest import saved_layout
    from zerosim.parallel.data import get_plan

    kind = c.get("layout.kind", str, default="flat")
    if kind not in ("flat", "per-parameter"):
        c.fail("layout.kind", f"must be 'flat' or 'per-parameter', got {kind!r}")
    if kind == "per-parameter" and c.get("layout.split", str) not in ("elements", "dim 0"):
        c.fail("layout.split", f"must be 'elements' or 'dim 0', got {c.get('layout.split')!r}")
    if c.count("layout.num_params", 1) != c.get("model.num_params"):
        c.fail("layout.num_params", f"is {c.get('layout.num_params')}, the model's is {c.get('model.num_params')}")
    layout, plan = saved_layout(c.m), get_plan(stage)
    want = {**layout.describe(), "regions": [[r.start, r.stop] for r in (plan.region(layout, i) for i in range(n))]}
    for key, value in want.items():
        got = c.get(f"layout.{key}", default=value if key == "kind" else ...)
        if got != value:
            c.fail(f"layout.{key}", f"is {_short(got)}, but {layout.num_params:,} parameters at ZeRO stage {stage} on "
                   f"world_size {n} give {_short(value)}: the stage, the world size or the layout was edited")


def _check_files(c: _Checker, n: int) -> None:
    files = c.get("files", list)
    if len(files) != n:
        c.fail("files", f"lists {len(files)} rank file(s), but world_size is {n}")
    for r, entry in enumerate(files):
        key = f"files[{r}]"
        if not isinstance(entry, dict):
            c.fail(key, f"must be a JSON object, got {entry!r}")
        for field, kind in (("rank", int), ("file", str), ("bytes", int), ("checksum", str), ("tensors", dict)):
            if not _is(entry.get(field), kind):
                c.fail(f"{key}.{field}", "is missing" if field not in entry
                       else f"must be {_KIND_WORDS[kind]}, got {entry[field]!r}")
        if entry["rank"] != r:
            c.fail(f"{key}.rank", f"is {entry['rank']}; the files are listed in rank order, so it must be {r}")
        if not _FILE.match(entry["file"]) or entry["file"] != f"rank{r:05d}.safetensors":
            c.fail(f"{key}.file", f"must be 'rank{r:05d}.safetensors', got {entry['file']!r}")
        if entry["bytes"] < 8:
            c.fail(f"{key}.bytes", f"must be at least 8 (a safetensors header's length), got {entry['bytes']}")
        if entry["checksum"].split(":", 1)[0] not in CHECKSUMS:
            c.fail(f"{key}.checksum", "must be '<algorithm>:<hex>' with an algorithm this version knows "
                   f"({', '.join(CHECKSUMS)}), "
                   f"got {entry['checksum']!r}")
        if set(entry["tensors"]) != set(files[0]["tensors"]):
            c.fail(f"{key}.tensors", f"names {sorted(entry['tensors'])}; "
                   f"rank 0's file holds {sorted(files[0]['tensors'])}")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
