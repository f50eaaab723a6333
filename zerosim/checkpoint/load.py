"""Load a checkpoint: check every file first, put the state back together, and reshard it to any N and stage.

    engine = ZeroEngine.load("ckpt", Cluster(4), model)                  # as saved (N may differ)
    engine = ZeroEngine.load("ckpt", Cluster(3), model, stage=3)         # N ranks at stage 3 from any save

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
from dataclasses import dataclass

import numpy as np

from zerosim.checkpoint.files import CheckpointError, read_checked, read_tensors
from zerosim.checkpoint.folders import resolve
from zerosim.checkpoint.manifest import check_model, read_manifest, saved_layout
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
            raise CheckpointError(f"{os.path.join(self.folder, 'manifest.json')}: its loss scaler is {saved.get('kind')!r}, "
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

    @functools.cached_property
    def params(self) -> np.ndarray:
        """(P,) compute format: the 16-bit weights every rank computes with."""
        return self._whole("params", sharded=self.manifest["stage"] == 3)

    @functools.cached_property
    def master(self) -> np.ndarray | None:
        """(P,) fp32 master (None: "pure" training, no master)."""
        return self._whole("master", sharded=self.manifest["stage"] >= 1) if "master" in self.files[0] else None

    @functools.cached_property
    def optimizer(self) -> dict:
        """{state name: (P,) update format}."""
        names = [k[len("optim."):] for k in self.files[0] if k.startswith("optim.")]
        return {k: self._whole(f"optim.{k}", sharded=self.manifest["stage"] >= 1) for k in names}


def policy_from_manifest(fields: dict, where: str) -> MixedPrecision:
    """The saved precision policy. A manifest written before the gradient recipes had names holds an `average`
    ("avg" is today's "seeds", unscaled by dividing as it then was); other averages have no recipe to resume."""
    fields = dict(fields)
    if "average" in fields:
        average = fields.pop("average")
        if average != "avg":
            raise CheckpointError(f"{where}: saved with averaging {average!r}, which zerosim now offers only as the named "
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
    """Each tensor of a rank file has the length its stage gives it: the params whole (Ψ,) at stages 0-2 and a
    (s,) shard at stage 3; the master and optimizer state whole at stage 0 and a shard at stages 1-3. The files
    passed their checksums, so a mismatch means the manifest's stage or world size was edited: it is named."""
    lay, stage, n = manifest["layout"], manifest["stage"], manifest["world_size"]
    for name, array in tensors.items():
        sharded = stage == 3 if name == "params" else stage >= 1
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
         checkpoint: bool | None = None, clip_grad: float | None = None):
    """A `ZeroEngine` on `cluster` holding the saved state, at `stage` (default: the saved one).

    optimizer: default the saved one (name and hyperparameters); another optimizer of the same kind may
        change hyperparameters (a new lr on resume); another kind is refused (its state differs).
    precision: must be the saved policy if given (a check: states cannot change format on load).
    expect_stage: refuse a checkpoint saved at another stage (`stage` itself may differ: that reshards).
    accumulation_steps, checkpoint, clip_grad: as for `ZeroEngine` (run settings, not state; default the saved K).
    The loss scaler resumes in its saved state, and the iteration count with it.
    """
    from zerosim.cluster import Cluster
    from zerosim.optim import get_optimizer
    from zerosim.zero.engine import ZeroEngine
    from zerosim.zero.state import FILLED_LATER, GivenStates

    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a zerosim Cluster (e.g. Cluster(4)), got {cluster!r}")
    if not cluster.backend.holds_values:  # checked first: on a meta cluster it loaded, then failed its first step
        raise ValueError(f"a checkpoint holds values, which the {cluster.backend.name} backend does not keep; "
                         "load it on a numpy (or mpi) cluster — the meta backend accounts memory and traffic only")
    state = read_state(directory, model, tag)
    m, where = state.manifest, os.path.join(state.folder, "manifest.json")
    saved_policy = state.precision
    if ("master" in state.files[0]) != (saved_policy.master is not None):
        raise CheckpointError(f"{where}: precision says master {saved_policy.master!r}, but the rank files "
                              + ("hold" if "master" in state.files[0] else "lack") + " a master copy")
    if precision is not None and get_precision(precision) != saved_policy:
        asked = get_precision(precision)
        differ = [f.name for f in dataclasses.fields(asked) if getattr(asked, f.name) != getattr(saved_policy, f.name)]
        saved, wanted = (", ".join(f"{k}={getattr(p, k)!r}" for k in differ) for p in (saved_policy, asked))
        raise CheckpointError(f"{where}: saved with precision {saved}, not the {wanted} asked for "
                              "(states cannot change format on load)")
    if expect_stage is not None and m["stage"] != expect_stage:
        raise CheckpointError(f"{where}: saved at ZeRO stage {m['stage']}, not the stage {expect_stage} expected")
    saved_opt = m["optimizer"]
    if optimizer is None:
        try:
            optimizer = get_optimizer(saved_opt["name"], **{k: tuple(v) if isinstance(v, list) else v
                                                            for k, v in saved_opt["hyperparameters"].items()})
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{where}: optimizer.hyperparameters do not make a {saved_opt['name']} optimizer "
                                  f"({e})") from None
    elif optimizer.name != saved_opt["name"]:
        raise CheckpointError(f"{where}: its optimizer state is {saved_opt['name']}'s; it cannot resume {optimizer.name}")
    saved_names = sorted(k[len("optim."):] for k in state.files[0] if k.startswith("optim."))
    if set(optimizer.state_names) != set(saved_names):
        raise CheckpointError(f"{where}: it holds optimizer state {saved_names}; {optimizer!r} keeps {sorted(optimizer.state_names)}")
    stage = m["stage"] if stage is None else stage
    if (m["world_size"], m["stage"]) == (cluster.world_size, stage):
        # the saved layout: each rank takes its file's tensors (writable views of the bytes just checked) as its states
        params = GivenStates({r.index: state.files[r.index] for r in cluster.ranks})
    else:
        params = FILLED_LATER  # every state allocated unwritten; put_state cuts the whole vectors anew
    scaler = state.loss_scaler(saved_policy)  # checked before anything is built
    engine = ZeroEngine(model, cluster, stage, optimizer, saved_policy, params=params,
                        accumulation_steps=m.get("accumulation_steps", 1) if accumulation_steps is None
                        else accumulation_steps,
                        checkpoint=checkpoint,
                        clip_grad=clip_grad)
    if params is FILLED_LATER:
        put_state(engine, state)
    engine.t, engine.iteration, engine.scaler = state.t, state.iteration, scaler
    return engine


def put_state(engine, state: SavedState) -> None:
    """Overwrite every local rank's params, master and optimizer state with `state`, cut by the engine's layout.

    Same world size and stage as saved: each rank takes its own saved file's tensors as they are; otherwise
    the whole vectors are cut anew (resharding)."""
    layout, m = engine.layout, state.manifest
    if (m["world_size"], m["stage"]) == (layout.world_size, engine.stage_number):
        for rank in engine.cluster.ranks:
            saved = state.files[rank.index]
            rank.params.array[...] = saved["params"]
            if rank.master is not None:
                rank.master.array[...] = saved["master"]
            for k, buf in rank.optim.items():
                buf.array[...] = saved[f"optim.{k}"]
        engine.t = state.t
        return

    # each saved (P,) vector in the new layout's (Ψ,) order, padding zero: once, then every rank cuts its part
    params = layout.arrange(state.params)
    master = layout.arrange(state.master) if state.master is not None else None
    optim = {k: layout.arrange(v) for k, v in state.optimizer.items()}

    def cut(dest: np.ndarray, arranged: np.ndarray, start: int) -> None:
        dest[...] = arranged[start : start + dest.shape[0]]

    for rank in engine.cluster.ranks:
        mine = engine.region(rank.index)
        cut(rank.params.array, params, layout.own(rank.index).start if engine.plan.shards_params else 0)
        if rank.master is not None:
            cut(rank.master.array, master, mine.start)
        for k, buf in rank.optim.items():
            cut(buf.array, optim[k], mine.start)
    engine.t = state.t
