"""A model's layers cut into pipeline stages: where the cuts fall (by torchtitan's rule, Megatron's, or the user's),
and the model each pipeline rank holds.

Letters: L transformer layers (an MLP's Linear + activation pairs), P pipeline ranks, V virtual stages a rank,
S = P·V stages. A model's units (`model.layers`) come in pieces (`pieces`): the input piece (a decoder's embedding,
and GPT's position add under tensor parallelism), one piece per layer (units named "block{i}..." or "fc{i}" /
"act{i}": the digits of a unit's first name part say which layer it belongs to), and the output piece (the final norm
and the head); the loss goes with the output piece, on the last stage. A model without numbered units has one piece
per unit.

    rule          where the cuts fall                                    what does not split
    torchtitan    the L layers, the input and the output piece each      more stages than pieces; an input or
    (default)     counted as one layer, cut evenly; the first E mod S    output piece heavier than a stage
                  stages take one more (pipeline_parallel.py,
                  `_generate_llm_fqn_per_model_part`, torchtitan b5bcd76;
                  `pipeline_parallel_first/last_stage_less_layers` = 1)
    megatron      L / P layers a rank, L / P / V a virtual stage; the    L not a multiple of P, or L / P of V
                  input piece on the first stage, the output on the      (core_v0.19.0, transformer_block.py
                  last (core_v0.19.0, transformer_block.py                `get_num_layers_to_build`: asserts)
                  `get_num_layers_to_build`)
    layers=(n_0, ..., n_{S-1})   the user's: n_j layers on stage j, the input piece on the first, the output
                  on the last (torchtitan's module_fqns_per_model_part, Megatron's num_layers_in_first/last_
                  pipeline_stage say the same)

Stage j runs on rank j mod P as its chunk j // P (_table.py). `StageModel` is one rank's model: its chunks' units in
chunk order, its own flat parameter vector (the units' windows of the whole vector, one after another), the whole
model's loss where it holds the last stage.
"""

from __future__ import annotations

import re

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.models import Model
from zerosim.models.meta import weights_without_data

_NUMBERED = re.compile(r"^[A-Za-z_]*?(\d+)$")  # "block3" -> 3, "fc0" -> 0, "act0" -> 0


@dataclass(frozen=True)
class Pieces:
    """A model's units as the pieces a pipeline cuts between: `first` and `last` [start, stop) ranges (None where the
    model has none) and one [start, stop) range per layer."""

    first: tuple | None
    layers: tuple
    last: tuple | None


def pieces(model) -> Pieces:
    """The pieces of `model` (see the module docstring)."""
    numbers = []
    for unit in model.layers:
        match = _NUMBERED.match(unit.name.split(".")[0])
        numbers.append(int(match.group(1)) if match else None)
    numbered = [i for i, n in enumerate(numbers) if n is not None]
    if not numbered:
        return Pieces(None, tuple((i, i + 1) for i in range(len(model.layers))), None)
    lo, hi = numbered[0], numbered[-1] + 1
    if any(n is None for n in numbers[lo:hi]):
        raise ValueError(f"{type(model).__name__}: a unit without a layer number sits between its layers; give the "
                         "stages by hand (layers=...)")
    layers, start = [], lo
    for i in range(lo + 1, hi + 1):
        if i == hi or numbers[i] != numbers[start]:
            layers.append((start, i))
            start = i
    return Pieces((0, lo) if lo else None, tuple(layers), (hi, len(model.layers)) if hi < len(model.layers) else None)


def _torchtitan(n_layers: int, S: int, first: bool, last: bool) -> list:
    """Layers per stage for S stages by torchtitan's `_generate_llm_fqn_per_model_part` (the input and output piece
    weigh one layer each: `pipeline_parallel_first_stage_less_layers = 1`, `..._last_stage_less_layers = 1`)."""
    if S == 1:
        return [n_layers]
    stages = S
    w_in, w_out = int(first), int(last)
    effective = n_layers + w_in + w_out
    if stages > effective:
        raise ValueError(f"Number of stages ({stages}) cannot be greater than effective layers ({effective}) "
                         "(torchtitan _generate_llm_fqn_per_model_part)")
    per, extra = divmod(effective, stages)
    if w_in > per or w_out > per:
        raise ValueError(f"input_weight ({w_in}) or output_weight ({w_out}) exceeds minimum layers per stage ({per}) "
                         "(torchtitan _generate_llm_fqn_per_model_part)")
    counts = [per + (j < extra) for j in range(stages)]
    counts[0] -= w_in
    counts[-1] -= w_out
    return counts


def _megatron(n_layers: int, pp: int, virtual: int) -> list:
    """Layers per stage by Megatron-Core's `get_num_layers_to_build` (core_v0.19.0): L / P a rank, L / P / V a
    virtual stage, asserted."""
    if n_layers % pp:
        raise ValueError(f"num_layers={n_layers} should be divisible by config.pipeline_model_parallel_size={pp} "
                         "(Megatron-Core core_v0.19.0 transformer_block.py get_num_layers_to_build); "
                         "rule='torchtitan' splits unevenly")
    per_rank = n_layers // pp
    if per_rank % virtual:
        raise ValueError(f"num_layers_per_pipeline_rank {per_rank} should be divisible by vp_size {virtual} "
                         "(Megatron-Core core_v0.19.0 transformer_block.py get_num_layers_to_build)")
    return [per_rank // virtual] * (pp * virtual)


RULES = {"torchtitan": "torchtitan's even split, the embedding and the head each weighing one layer",
         "megatron": "Megatron-Core's: L / P layers a rank, refused when it does not divide"}


@dataclass(frozen=True)
class StageSplit:
    """Which units each stage holds: `units[j]` the [start, stop) unit range of stage j (stages in order tile the
    model), P pipeline ranks, V chunks a rank."""

    units: tuple
    pp: int
    virtual: int
    rule: str

    @property
    def stages(self) -> int:
        return len(self.units)

    def chunks(self, rank: int) -> tuple:
        """Rank `rank`'s stages in chunk order: rank, rank + P, ..."""
        return tuple(range(rank, self.stages, self.pp))

    def layers_per_stage(self, model) -> tuple:
        """How many of the model's layers (pieces) each stage holds."""
        layers = pieces(model).layers
        return tuple(sum(a >= lo and b <= hi for a, b in layers) for lo, hi in self.units)


def split(model, pp: int, virtual: int = 1, rule: str = "torchtitan", layers=None) -> StageSplit:
    """Cut `model` into P·V stages by `rule` (RULES), or at the user's `layers` (layers per stage); refused as the
    framework refuses (see the module docstring)."""
    stages = pp * virtual
    cut = pieces(model)
    n = len(cut.layers)
    if layers is not None:
        counts = list(layers)
        if len(counts) != stages or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts) \
                or sum(counts) != n:
            raise ValueError(f"layers= must give {stages} non-negative layer counts (one per stage: pp {pp} × "
                             f"virtual stages {virtual}) adding up to the model's {n} layers, got {layers!r}")
        rule = "layers"
    elif rule == "torchtitan":
        counts = _torchtitan(n, stages, cut.first is not None, cut.last is not None)
    elif rule == "megatron":
        counts = _megatron(n, pp, virtual)
    else:
        raise ValueError(f"split rule must be one of {tuple(RULES)} (or give layers=...), got {rule!r}")
    units, at = [], 0
    for j, count in enumerate(counts):
        lo = cut.layers[at][0] if at < n else (cut.last[0] if cut.last else len(model.layers))
        at += count
        hi = cut.layers[at - 1][1] if count else lo
        if j == 0 and cut.first is not None:
            lo = cut.first[0]
        if j == stages - 1:
            hi = len(model.layers)
        units.append((lo, hi))
    empty = [j for j, (lo, hi) in enumerate(units) if hi <= lo]
    if empty:
        raise ValueError(f"stage {empty[0]} would hold no unit ({stages} stages over {n} layers"
                         f"{' and the input and output pieces' if cut.first or cut.last else ''}): give fewer stages "
                         "(torchtitan refuses: 'Configuration would result in empty stages')")
    return StageSplit(tuple(units), pp, virtual, rule)


class StageModel(Model):
    """The model one pipeline rank holds: the units of its chunks (`split.chunks(rank)`), in chunk order, over a flat
    vector of their own; `chunks[c]` is chunk c's [start, stop) in this model's units. The loss is the whole model's
    (only the rank holding the last stage runs it). Weights and gradients are the whole model's, read and written
    through it (`unflatten`, `pack`), so a data-less meta model stays data-less."""

    def __init__(self, whole, split_: StageSplit, rank: int):
        self.whole, self.rank, self.split = whole, rank, split_
        self.stage_ids = split_.chunks(rank)
        units, chunks = [], []
        for j in self.stage_ids:
            lo, hi = split_.units[j]
            chunks.append((len(units), len(units) + hi - lo))
            units += range(lo, hi)
        self.units, self.chunks = tuple(units), tuple(chunks)
        blocks, saved = [], []  # the whole model's checkpoint blocks, cut at the chunks' edges and renumbered
        for c0, c1 in chunks:
            for a, b in whole.checkpoint_blocks:
                lo, hi = max(a, units[c0]), min(b, units[c1 - 1] + 1)
                if lo < hi:
                    blocks.append((c0 + lo - units[c0], c0 + hi - units[c0]))
                    if (a, b) in whole.saved_blocks:  # a piece of a block checkpointing leaves alone: left alone
                        saved.append(blocks[-1])
        super().__init__([whole.layers[u] for u in units], whole.loss, blocks, saved)
        ids = self.stage_ids
        self.first = ids[0] == 0  # holds stage 0: reads the micro-batch
        self.last = ids[-1] == split_.stages - 1  # holds the last stage: runs the loss
        for name in ("checkpoint", "vocab", "seq_len", "d_model"):  # what the step and the passes ask a decoder
            if hasattr(whole, name):
                setattr(self, name, getattr(whole, name))

    @property
    def checkpointing(self) -> bool:
        return bool(getattr(self.whole, "checkpointing", False))

    def check_batch(self, x, target) -> None:
        self.whole.check_batch(x, target)

    def unflatten(self, flat, i: int) -> dict:
        start, stop = self.layer_window(i)
        window = flat[start:stop] if len(flat) == self.num_params and self.num_params != stop - start else flat
        return self.whole.unflatten(window, self.units[i])

    def pack(self, i: int, tensors: dict):
        return self.whole.pack(self.units[i], tensors)

    def init_params(self, rng=None):
        return self.cut(self.whole.init_params(rng))

    def cut(self, whole_flat) -> np.ndarray:
        """This rank's (P_s,) weights from the whole model's (P,) vector: its units' windows, one after another (a
        meta model's weights, which have no data, stay so)."""
        if getattr(whole_flat, "is_meta", False):
            return weights_without_data(self.num_params)
        parts = [whole_flat[slice(*self.whole.layer_window(u))] for u in self.units]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def join(self, whole_flat: np.ndarray, mine) -> None:
        """Write this rank's (P_s,) vector `mine` into its units' windows of the whole (P,) vector `whole_flat`."""
        at = 0
        for u in self.units:
            a, b = self.whole.layer_window(u)
            whole_flat[a:b] = mine[at:at + b - a]
            at += b - a
