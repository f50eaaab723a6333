"""Load a checkpoint: check every file first, put the state back together, and reshard it to any N and stage.

    engine = zerosim.checkpoint.load("ckpt", Cluster(4), model)            # as saved (N may differ)
    engine = zerosim.checkpoint.load("ckpt", Cluster(3), model, stage=3)   # N ranks at stage 3 from any save

Letters: P parameters; N, s the saving run's ranks and shard size; M the loading run's ranks.
Nothing is built until the manifest and every rank file have passed their checks (present, the
recorded size, the recorded checksum, the expected model, format version, precision and stage), so a
bad checkpoint is refused before anything is loaded. The saved state is first put back together as
whole (P,) vectors — padding removed — and then cut for the M new ranks by the new layout: resharding
from N to M ranks and from stage s to s′ is that second cut. (A real system reads only the byte
ranges each new rank needs; here each process reads every file, which is simple and checks them all.)
"""

from __future__ import annotations

import dataclasses
import functools
import os

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.checkpoint._files import CheckpointError, read_checked, read_tensors
from zerosim.checkpoint._folders import resolve
from zerosim.checkpoint._manifest import check_model, read_manifest, saved_layout
from zerosim.checkpoint._runs import register, run_id_of
from zerosim.cluster import Cluster
from zerosim.optim import get_optimizer
from zerosim.parallel.data import GradientRecipe, ZeroEngine, buffer_sizes, get_plan
from zerosim.parallel.data.layouts import layout_for
from zerosim.parallel.data.multinode import check_recipe, default_recipe, mesh_groups
from zerosim.precision import MixedPrecision, get_precision, loss_scaler_from_state_dict


@dataclass
class SavedState:
    """A checked checkpoint: each saved rank's tensors, and (computed when asked) the whole (P,) vectors in
    the order of the model's flat parameters, padding removed."""

    manifest: dict
    folder: str
    files: dict  # {saved rank: {"params", "master", "optim.<name>": array}}

    @property
    def t(self) -> int:
        """Optimizer steps taken."""
        return int(self.manifest["optimizer"]["step"])

    @property
    def precision(self) -> MixedPrecision:
        where = os.path.join(self.folder, "manifest.json")
        try:
            return policy_from_manifest(self.manifest["precision"], where)
        except CheckpointError:
            raise
        except (TypeError, ValueError) as e:  # an unknown or edited field: MixedPrecision says which
            raise CheckpointError(f"{where}: precision does not describe a policy zerosim can run ({e})") from None

    @property
    def iteration(self) -> int:
        """Calls of `step` run (skipped steps included); t for a checkpoint that did not record it."""
        return int(self.manifest.get("iteration", self.t))

    def loss_scaler(self, policy):
        """The saved loss scaler, in its saved state (a static scale is the policy's own)."""
        saved = self.manifest.get("loss_scaler") or {}
        fresh = policy.make_scaler()
        if saved.get("kind") != fresh.kind:
            raise CheckpointError(f"{os.path.join(self.folder, 'manifest.json')}: its loss scaler is "
                                  f"{saved.get('kind')!r}, "
                                  f"but its precision policy names {fresh.kind!r}")
        if fresh.kind == "static":
            return fresh
        try:
            return loss_scaler_from_state_dict(saved)
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"{os.path.join(self.folder, 'manifest.json')}: loss_scaler is not a state the "
                                  f"{fresh.kind} scaler can resume ({type(e).__name__}: {e})") from None

    def _whole(self, name: str, sharded: bool) -> np.ndarray:
        m = self.manifest
        if not sharded:
            return self.files[0][name][: m["layout"]["num_params"]]  # padding removed
        whole = np.concatenate([self.files[r][name] for r in range(m["world_size"])])  # (Ψ,) the shards in rank order
        return saved_layout(m).unarrange(whole)  # (P,) model order, padding removed

    @property
    def _plan(self):
        """The saved stage's plan: which of the saved tensors are shards."""
        return get_plan(self.manifest["stage"])

    @functools.cached_property
    def params(self) -> np.ndarray:
        """(P,) compute format: the 16-bit weights every rank computes with."""
        return self._whole("params", sharded=self._plan.shards("params"))

    @functools.cached_property
    def master(self) -> np.ndarray | None:
        """(P,) fp32 master (None: "pure" training, no master)."""
        return self._whole("master", sharded=self._plan.shards("master")) if "master" in self.files[0] else None

    @functools.cached_property
    def optimizer(self) -> dict:
        """{state name: (P,) in its storage format (the update format, or the policy's optim_state)}."""
        names = [k[len("optim."):] for k in self.files[0] if k.startswith("optim.")]
        return {k: self._whole(f"optim.{k}", sharded=self._plan.shards("optimizer")) for k in names}


def policy_from_manifest(fields: dict, where: str) -> MixedPrecision:
    """The saved precision policy. A manifest written before the gradient recipes had names holds an `average`
    ("avg" is today's "seeds", unscaled by dividing as it then was); other averages have no recipe to resume."""
    fields = dict(fields)
    if "average" in fields:
        average = fields.pop("average")
        if average != "avg":
            raise CheckpointError(f"{where}: saved with averaging {average!r}, which zerosim now offers only as the "
                                  "named "
                                  f"recipes of docs/recipes.md; its gradients would not reduce the same way")
        fields.setdefault("reduction", "seeds")
        fields.setdefault("unscale", "divide")
    return MixedPrecision(**fields)


def read_files(folder: str, manifest: dict) -> dict:
    """{rank: {name: array}}: every rank file present, of its recorded size and checksum (checked before any
    is parsed) — or a CheckpointError naming the file."""
    raw = {}
    for entry in manifest["files"]:
        path = os.path.join(folder, entry["file"])
        if not os.path.exists(path):
            raise CheckpointError(f"{path}: missing (rank {entry['rank']} of {manifest['world_size']}'s file)")
        raw[entry["rank"]] = read_checked(path, entry["bytes"], entry["checksum"])
    files = {e["rank"]: read_tensors(raw[e["rank"]], e["tensors"], os.path.join(folder, e["file"]))
             for e in manifest["files"]}
    for e in manifest["files"]:
        check_lengths(manifest, files[e["rank"]], e["file"], os.path.join(folder, "manifest.json"))
    return files


def check_lengths(manifest: dict, tensors: dict, file: str, where: str) -> None:
    """Each tensor of a rank file has the length its stage's plan gives it: whole (Ψ,) or a (s,) shard. The files
    passed their checksums, so a mismatch means the manifest's stage or world size was edited: it is named."""
    lay, stage, n = manifest["layout"], manifest["stage"], manifest["world_size"]
    plan = get_plan(stage)
    for name, array in tensors.items():
        sharded = plan.shards("params" if name == "params" else "master" if name == "master" else "optimizer")
        want = lay["shard_size"] if sharded else lay["padded"]
        if array.shape != (want,):
            raise CheckpointError(f"{where}: stage is {stage}, but {file} holds {name!r} of shape {array.shape}; stage "
                                  f"{stage} on {n} ranks keeps ({want},): the stage or world_size was edited")


def read_state(directory: str, model=None, tag: str | None = None) -> SavedState:
    """Check and read a checkpoint; with `model`, refuse one saved from another model."""
    folder = resolve(directory, tag)
    manifest = read_manifest(folder)
    if model is not None:
        check_model(manifest, model, os.path.join(folder, "manifest.json"))
    return SavedState(manifest, folder, read_files(folder, manifest))


def load(directory: str, cluster, model, optimizer=None, *, stage: int | None = None, precision=None,
         expect_stage: int | None = None, tag: str | None = None, accumulation_steps: int | None = None,
         checkpoint: bool | None = None, clip_grad: float | None = None, shard_group: int | None = None):
    """A `ZeroEngine` on `cluster` holding the saved state, at `stage` (default: the saved one).

    optimizer: default the saved one (name and hyperparameters); another optimizer of the same kind may
        change hyperparameters (a new lr on resume); another kind is refused (its state differs).
    precision: must be the saved policy if given (a check: states cannot change format on load), but for its
        `arithmetic`, which the resumed steps then run on (a checkpoint saved before it existed holds "portable").
    expect_stage: refuse a checkpoint saved at another stage (`stage` itself may differ: that reshards).
    accumulation_steps, checkpoint, clip_grad: as for `ZeroEngine` (run settings, not state; default the saved K).
    The loss scaler resumes in its saved state, and the iteration count with it.
    stage may name a strategy ("hsdp", ...); a strategy's checkpoint loads as that strategy by default, with its
    saved shard_group S; another stage, strategy, S or world size reshards (a mesh to a flat cluster and back).
    """
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a zerosim Cluster (e.g. Cluster(4)), got {cluster!r}")
    if not (hasattr(model, "specs") and hasattr(model, "num_params")):  # checked first: 1.5 failed as an AttributeError
        raise TypeError(f"model must be a zerosim model (MLP, GPT, Llama, ...) the checkpoint was saved from, got "
                        f"{model!r}")
    if not cluster.backend.holds_values:  # checked first: on a meta cluster it loaded, then failed its first step
        raise ValueError(f"a checkpoint holds values, which the {cluster.backend.name} backend does not keep; "
                         "load it on a numpy (or mpi) cluster — the meta backend accounts memory and traffic only")
    state = read_state(directory, model, tag)
    m, where = state.manifest, os.path.join(state.folder, "manifest.json")
    saved_policy = _saved_policy(state, precision, where)
    if expect_stage is not None and m["stage"] != expect_stage:
        raise CheckpointError(f"{where}: saved at ZeRO stage {m['stage']}, not the stage {expect_stage} expected")
    optimizer = _saved_optimizer(state, optimizer, where)
    mesh = m.get("mesh") or {}
    if stage is None:
        stage = mesh.get("strategy", m["stage"])
        shard_group = mesh.get("shard_group") if shard_group is None else shard_group
    scaler = state.loss_scaler(saved_policy)  # checked before anything is built
    engine = ZeroEngine(
        model,
        cluster,
        stage,
        optimizer,
        saved_policy,
        states=rank_states(state, cluster, model, stage, shard_group),
        accumulation_steps=m.get("accumulation_steps", 1) if accumulation_steps is None else accumulation_steps,
        checkpoint=checkpoint,
        clip_grad=clip_grad,
        shard_group=shard_group,
    )
    engine.t, engine.iteration, engine.scaler = state.t, state.iteration, scaler
    register(engine, run_id_of(m))  # a resumed run is the saved one: it saves on into that run's folder (runs.py)
    return engine


def _saved_policy(state: SavedState, precision, where: str):
    """The saved precision policy, checked against the rank files and against `precision` if given (only its
    `arithmetic` may differ: the resumed steps run on the asked one)."""
    saved_policy = state.precision
    if ("master" in state.files[0]) != (saved_policy.master is not None):
        raise CheckpointError(f"{where}: precision says master {saved_policy.master!r}, but the rank files "
                              + ("hold" if "master" in state.files[0] else "lack") + " a master copy")
    for name, fmt in (("params", saved_policy.compute_format), ("master", saved_policy.master_format)):
        held = state.files[0].get(name)  # the files passed their checksums: a mismatch is the manifest's precision
        if held is not None and fmt is not None and held.dtype != fmt.dtype:
            key = "precision.compute" if name == "params" else "precision.master"
            raise CheckpointError(f"{where}: {key} says {fmt.name}, but the rank files hold {name} as "
                                  f"{held.dtype}: the manifest's precision was edited")
    if precision is not None:  # the kernels (`arithmetic`) are how steps run, not a format: the asked ones run on
        saved_policy = saved_policy.with_(arithmetic=get_precision(precision).arithmetic)
    if precision is not None and get_precision(precision) != saved_policy:
        asked = get_precision(precision)
        differ = [f.name for f in dataclasses.fields(asked) if getattr(asked, f.name) != getattr(saved_policy, f.name)]
        saved, wanted = (", ".join(f"{k}={getattr(p, k)!r}" for k in differ) for p in (saved_policy, asked))
        raise CheckpointError(f"{where}: saved with precision {saved}, not the {wanted} asked for "
                              "(states cannot change format on load)")
    return saved_policy


def _saved_optimizer(state: SavedState, optimizer, where: str):
    """The optimizer to resume: the saved one when None, else `optimizer`, refused if its kind or state names differ
    from the saved state's."""
    m = state.manifest
    saved_opt = m["optimizer"]
    if optimizer is None:
        try:
            optimizer = get_optimizer(saved_opt["name"], **{k: tuple(v) if isinstance(v, list) else v
                                                            for k, v in saved_opt["hyperparameters"].items()})
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{where}: optimizer.hyperparameters do not make a {saved_opt['name']} optimizer "
                                  f"({e})") from None
    elif optimizer.name != saved_opt["name"]:
        raise CheckpointError(f"{where}: its optimizer state is {saved_opt['name']}'s; it cannot resume "
                              f"{optimizer.name}")
    saved_names = sorted(k[len("optim."):] for k in state.files[0] if k.startswith("optim."))
    if set(optimizer.state_names) != set(saved_names):
        raise CheckpointError(f"{where}: it holds optimizer state {saved_names}; {optimizer!r} keeps "
                              f"{sorted(optimizer.state_names)}")
    return optimizer


def rank_states(state: SavedState, cluster, model, stage, shard_group: int | None = None) -> dict:
    """{local rank: {"params", "master", "optim.<name>": array}}: what each local rank of a ZeRO-`stage` engine on
    `cluster` starts from. At the saved world size and stage, its saved file's tensors as they are (writable views
    of the bytes just checked: no copy); otherwise cut anew from the whole vectors by the new layout (resharding:
    each saved (P,) vector arranged once in the new layout's (Ψ,) order, padding zero, then every rank's part
    copied). A strategy cuts over its shard groups (`shard_group`): rank r takes shard position(r), and the
    replicas of a shard each get their own copy (they update it in place)."""
    m, plan = state.manifest, get_plan(stage)
    groups = mesh_groups(plan, cluster, shard_group)
    recipe = GradientRecipe.of(state.precision, default_recipe(plan, state.precision))
    check_recipe(plan, recipe)  # refused here, before the whole vectors are built, as the engine would
    if (m["world_size"], m["stage"]) == (groups.shard.size, plan.stage):  # the saved cut: each shard as saved
        out, taken = {}, set()
        for r in cluster.ranks:
            p = groups.shard.position(r.index)
            files = state.files[p]
            out[r.index] = files if p not in taken else {k: v.copy() for k, v in files.items()}
            taken.add(p)
        return out
    layout = layout_for(model, cluster.world_size, recipe, cluster.backend, groups.shard)
    sizes = buffer_sizes(plan, layout)
    whole = {"params": state.params, "master": state.master, **{f"optim.{k}": v for k, v in state.optimizer.items()}}
    arranged = {name: layout.arrange(v) for name, v in whole.items() if v is not None}
    out = {}
    for rank in cluster.ranks:
        first = layout.own(rank.index).start if plan.shards("params") else 0
        cut = {"params": slice(first, first + sizes["params"])}  # the rest: the region it updates
        out[rank.index] = {
            name: v[cut.get(name, plan.region(layout, rank.index))].copy() for name, v in arranged.items()
        }
    return out
