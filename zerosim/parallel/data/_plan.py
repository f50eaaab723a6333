"""The four ZeRO stages as plans: which buffers a rank holds whole or sharded, and which collective runs when.

Letters: P parameters, N ranks, s the shard (ceil(P/N) with the flat layout; Σ c_p with the per-parameter
ones: _partition.py), Ψ = N*s the padded length, K = optimizer-state bytes per parameter (Adam: 8).

    stage  held as shards     each use of a unit    as backward ends a unit   end of backward   after the update
    0      -                   -                     -                         all-reduce        -
    1      master, optimizer   -                     -                         reduce-scatter    all-gather params
    2      + grads             -                     reduce-scatter its grads  -                 all-gather params
    3      + params            gather it, then free  reduce-scatter its grads  -                 -

Whatever a rank does not hold as a shard it holds whole (Ψ elements). `sizes` turns a plan and a layout
into every buffer's length — the one place the engine, its memory guard, the checkpoint code and
`zerosim.analysis.costs` read them from — so per-rank resting bytes follow (seed 001's table; the ledgers measure
them and the tests compare):

    stage 0   2Ψ params + 2Ψ grads + (4 + K)Ψ master & state        16Ψ for Adam
    stage 1   2Ψ params + 2Ψ grads + (4 + K)s                        4Ψ + 12Ψ/N
    stage 2   2Ψ params + 2s grads + (4 + K)s                        2Ψ + 14Ψ/N
    stage 3   2s params + 2s grads + (4 + K)s                        16Ψ/N

Stage numbers appear here and nowhere else in the engine: the rest of zero/ asks a plan what it shards.

Many nodes (`STRATEGIES`): the hierarchical variants are stage 3's plan with groups. Letters: G GPUs per node,
S the shard group (`shard_group=`, default G), R = N/S its replicas.

    strategy          sharded over  replicas' all-reduce           a unit after forward        follows
    full_shard        the world     -                              freed (gathered again)      ZeRO-3; FSDP2's default
    no_reshard        the world     -                              kept until its backward     FSDP2, reshard_after_
                                                                                               forward=False
    reshard_to_group  the world     -                              a 1/S piece until backward  ... reshard_after_
                                                                                               forward=S
    hpz               the world     -                              a 1/S piece until the step  ZeRO++ hpZ, zero_hpz_
                                                                                               partition_size=S
    no_reshard_no_sync the world    -                              kept until the step's last  FSDP2 under torch's
                                                                   backward; gradients whole,  pipelining (below)
                                                                   reduce-scattered once then
    hsdp              S ranks       each micro-step, after its RS  freed                       FSDP2 HSDP (2-D mesh)
    hsdp_no_sync      S ranks       the last micro-step: partial   freed                       ... with set_requires_
                                    sums until then                                            all_reduce(False)
    mics              S ranks       at the boundary, accumulated   freed                       DeepSpeed MiCS
                                                                                               (<= 0.19.6)
    mics_hierarchical S ranks       at the boundary, accumulated   freed; gathered across      ... mics_hierarchical_
                                                                   nodes, then within each     params_gather

no_reshard_no_sync is what a stage's FSDP2 does beside a pipeline on torchtitan's default path: apply_fsdp sets
`reshard_after_forward = not pp_enabled` ("to avoid per-microbatch all-gathers, which can be expensive and
non-overlapped": torchtitan 018740b, torchtitan/models/llama3/infra/parallelize.py, `apply_fsdp`), and torch's
pipelining runs every micro-batch's backward with `set_reshard_after_backward(False)` and
`set_requires_gradient_sync(False)`, then, after the last, `perform_reduce_grad` turns both back on and runs each FSDP
group's `post_backward`: one reshard and one reduce-scatter a step (torch 2.13, distributed/pipelining/stage.py,
`_PipelineStageBase.backward_maybe_with_nosync`, `perform_reduce_grad`). So the stage's parameters are
gathered once a step (the first micro-batch's forward) and held to the last backward, its gradients accumulate whole
(FSDP2's unsharded accumulated gradient) and are reduce-scattered once, a call a unit: ZeRO-3's shards at rest,
ZeRO-1's reduction. It runs with zerosim's flat layout and recipe (`recipe="seeds"`): FSDP2's per-parameter reduction
of the accumulated gradient is not modelled yet (the engine refuses recipe "fsdp2" beside it).

docs/recipes.md cites the code each follows (file and function); parallel/data/multinode/_groups.py builds their groups.
MiCS is DeepSpeed <= 0.19.6: 0.19.7 removed it (runtime/config.py: _REMOVED_ZERO_CONFIG_KEYS); zerosim keeps it,
labelled.
"""

from __future__ import annotations

import functools
from dataclasses import field, replace

from zerosim._dataclass import dataclass

BUFFERS = ("params", "grads", "master", "optimizer")  # a rank's model states: 16-bit params, grads, fp32 master, state
PLACED = BUFFERS + ("grad32",)  # ... and the fp32 gradient the optimizer reads: what a placement may move
MEMORY_TIERS = ("device", "host", "nvme")  # where a buffer lives (cluster/_rank.py `ledger_of`)


MICS_RELEASE = "DeepSpeed <= 0.19.6 (removed in 0.19.7)"  # runtime/config.py: _REMOVED_ZERO_CONFIG_KEYS


@dataclass(frozen=True)
class AfterForward:
    """What a gathered unit becomes once forward used it (FSDP2's `reshard_after_forward`): the helpers read these
    answers (_fetch.py, _gather.py), never the name."""

    name: str
    keeps_whole: bool = False  # gathered until its backward use: reshard_after_forward=False (no backward gather)
    keeps_piece: bool = False  # a 1/S secondary piece, from which backward gathers within a group of S
    piece_until_backward: bool = False  # ... freed by that gather (FSDP2's to_unsharded); else kept until the step
    keeps_for_step: bool = False  # gathered once a step and held over every micro-step until the end of backward


AFTER_FORWARD = {
    a.name: a
    for a in (
        AfterForward("free"),  # FSDP2's reshard_after_forward=True, ZeRO-3's default: gathered again in backward
        AfterForward("keep", keeps_whole=True),  # reshard_after_forward=False: FSDP2's post_forward skips the reshard
        AfterForward("piece until backward", keeps_piece=True, piece_until_backward=True),  # reshard_after_forward=S
        AfterForward("piece until step", keeps_piece=True),  # ZeRO++ hpZ: the secondary partition lives to the step
        AfterForward("keep for the step", keeps_whole=True, keeps_for_step=True),  # FSDP2 beside PP (docstring)
    )
}
# how the replicas of a shard agree (HSDP, MiCS): parallel/data/multinode/_replicate.py AGREEMENTS holds each one's
# functions; None: one copy of each shard, nothing to agree on
REPLICATIONS = (None, "each micro-step", "last micro-step", "accumulated")


@dataclass(frozen=True)
class Plan:
    """One stage: which model states each rank holds as a 1/N shard, and when it communicates."""

    stage: int
    sharded: tuple  # the BUFFERS each rank holds a shard of; the others it holds whole
    end_of_backward: str | None  # the gradients' collective when backward is done: "all_reduce", "reduce_scatter",
    #                              or None: reduce-scattered unit by unit as backward makes them
    refresh_after_update: bool  # all-gather the updated 16-bit shards so every rank holds the whole model again
    # -- many nodes (the defaults: one shard per rank of the world, as the flat stages) --
    name: str = ""  # the strategy's name (STRATEGIES); "" for the numbered stages
    sharded_over: str = "world"  # the groups a sharded buffer is cut over: "world" (N shards) or "shard" (S shards,
    #                              each held by the R ranks of a replicate group)
    replicate: str | None = None  # the replicas' all-reduce of a reduced shard: None, "each micro-step" (HSDP),
    #                               "last micro-step" (HSDP's partial sums), "accumulated" (MiCS, at the boundary)
    after_forward: str = "free"  # a gathered unit once forward used it: "free", "keep" (until its backward use),
    #                              "piece until backward", "piece until step" (a 1/S secondary piece, gathered
    #                              within the secondary groups)
    hierarchical_gather: bool = False  # gather across nodes, then within each (MiCS)
    end_by_unit: bool = False  # the end-of-backward collective one call a unit (FSDP2's post_backward per group), not
    #                            one over the whole buffer
    framework: str | None = None  # whose code it follows ("fsdp2", "deepspeed"): the recipes it runs with
    recipe: str | None = None  # the recipe it runs with where its framework's is not modelled beside it (None: the
    #                            framework's)
    release: str = ""  # which releases of that framework have it, where not all do (docs/frameworks.md)
    # where each buffer lives: ((buffer, tier), ...) for the PLACED buffers not on the device (parallel/offload sets it)
    placement: tuple = field(default=(), repr=False)

    def __post_init__(self):
        if self.after_forward not in AFTER_FORWARD:
            raise ValueError(f"after_forward must be one of {tuple(AFTER_FORWARD)}, got {self.after_forward!r}")
        if self.replicate not in REPLICATIONS:
            raise ValueError(f"replicate must be one of {REPLICATIONS}, got {self.replicate!r}")

    @property
    def reshard(self) -> AfterForward:
        """What a gathered unit becomes after its forward use (`after_forward`, as a record)."""
        return AFTER_FORWARD[self.after_forward]

    def where(self, buffer: str) -> str:
        """The memory tier `buffer` (one of PLACED) lives on: "device" unless the placement says "host" or "nvme"."""
        return self._placed.get(buffer, "device")

    @functools.cached_property  # asked per rank and step: the placement read once
    def _placed(self) -> dict:
        return dict(self.placement)

    def shards(self, buffer: str) -> bool:
        """True when each rank holds only its shard of `buffer` (one of BUFFERS)."""
        if buffer in self.sharded:
            return True
        if buffer not in BUFFERS:
            raise ValueError(f"unknown buffer {buffer!r}; a rank's model states are {BUFFERS}")
        return False

    @functools.cached_property  # asked for every rank and layer: answered once (a frozen dataclass keeps a __dict__)
    def gathers_params(self) -> bool:
        """Stage 3: a unit's params are all-gathered before each use and freed after it."""
        return self.shards("params")

    @property
    def reduces_per_unit(self) -> bool:
        """Stages 2/3: a unit's gradients are reduce-scattered as soon as backward has made them."""
        return self.end_of_backward is None

    def end_reduction(self, elementwise_optimizer: bool = True) -> str | None:
        """The collective at the end of backward, for any optimizer: a matrix optimizer (Muon) reduce-scatters too,
        as Moonshot's Distributed Muon does, and brings its matrices together after (parallel/data/muon)."""
        return self.end_of_backward

    def sizes(self, whole, shard) -> dict:
        """{buffer: elements one rank holds}: `shard` for a sharded buffer, `whole` otherwise ("master" and
        "optimizer" cover the region the rank updates). Numbers of any kind: a layout's Ψ and s, or a formula's."""
        return {b: shard if self.shards(b) else whole for b in BUFFERS}

    def bytes_of(self, whole, shard, widths: dict) -> dict:
        """{part: bytes one rank holds}: each part of `widths` ({"params": 2, "grads": 2, "master": 4, "optim:m": 4,
        ...}: bytes an element; an "optim:<name>" part is the optimizer buffer's) times its buffer's `sizes`. The one
        place a rank's model-state bytes come from: the ZeRO paper's formula (analysis/costs/_memory.py) and the
        offload tiers (parallel/offload/_memory.py) read it; a run's ledger allocates the same (_state.py)."""
        n = self.sizes(whole, shard)
        return {part: width * n["optimizer" if part.startswith("optim:") else part] for part, width in widths.items()}

    def region(self, layout, rank: int) -> slice:
        """The part of the padded flat buffer `rank` updates (its master and optimizer state): its shard, or all."""
        return layout.own(rank) if self.shards("master") else slice(0, layout.padded)

    @property
    def label(self) -> str:
        """How messages name it: "ZeRO-3", or the strategy's name."""
        return self.name or f"ZeRO-{self.stage}"

    @property
    def uses_groups(self) -> bool:
        """True when the plan needs a group size (S): shards over groups, or keeps a secondary piece."""
        return self.sharded_over != "world" or self.reshard.keeps_piece


PLANS = {
    0: Plan(0, (), "all_reduce", False),  # plain data parallel
    1: Plan(1, ("master", "optimizer"), "reduce_scatter", True),  # P_os
    2: Plan(2, ("grads", "master", "optimizer"), None, True),  # P_os+g
    3: Plan(3, ("params", "grads", "master", "optimizer"), None, False),  # P_os+g+p
}


_FULL_SHARD = replace(PLANS[3], name="full_shard")
STRATEGIES = {
    p.name: p
    for p in (
        _FULL_SHARD,
        replace(_FULL_SHARD, name="no_reshard", after_forward="keep", framework="fsdp2"),
        replace(_FULL_SHARD, name="reshard_to_group", after_forward="piece until backward", framework="fsdp2"),
        replace(_FULL_SHARD, name="hpz", after_forward="piece until step", framework="deepspeed"),
        replace(_FULL_SHARD, name="no_reshard_no_sync", sharded=("params", "master", "optimizer"),
                end_of_backward="reduce_scatter", after_forward="keep for the step", end_by_unit=True,
                framework="fsdp2", recipe="seeds"),
        replace(_FULL_SHARD, name="hsdp", sharded_over="shard", replicate="each micro-step", framework="fsdp2"),
        replace(_FULL_SHARD, name="hsdp_no_sync", sharded_over="shard", replicate="last micro-step",
                framework="fsdp2"),
        replace(_FULL_SHARD, name="mics", sharded_over="shard", replicate="accumulated", framework="deepspeed",
                release=MICS_RELEASE),
        replace(_FULL_SHARD, name="mics_hierarchical", sharded_over="shard", replicate="accumulated",
                hierarchical_gather=True, framework="deepspeed", release=MICS_RELEASE),
    )
}


STAGES = tuple(PLANS)  # the ZeRO stages by number, 0-3 (STRATEGIES name the rest)


def get_plan(stage) -> Plan:
    """The plan of ZeRO `stage` (0-3), or of a strategy by name (STRATEGIES: "hsdp", "mics", "hpz", ...); a
    ValueError naming what there is otherwise. A Plan is its own plan. The one check of a stage, with `check_stage`
    (a number only): the engine, TrainConfig, the formulas, a manifest, the explorer and the flags' choices
    (cli/choices.py STAGES, a copy of STAGES) all come here."""
    if isinstance(stage, Plan):
        return stage
    if isinstance(stage, str) and stage in STRATEGIES:
        return STRATEGIES[stage]
    if not _is_stage(stage):
        raise ValueError(f"ZeRO stage must be one of {sorted(PLANS)} or a strategy {tuple(STRATEGIES)}, got "
                         f"{stage!r}")
    return PLANS[stage]


def check_stage(stage, name: str = "stage") -> int:
    """`stage` when it is a ZeRO stage by number (STAGES), else a ValueError "{name} must be 0, 1, 2 or 3, got ...":
    for what takes no strategy's name (a formula, a manifest, the explorer, a DeepSpeed config's key)."""
    if not _is_stage(stage):
        raise ValueError(f"{name} must be {', '.join(map(str, STAGES[:-1]))} or {STAGES[-1]}, got {stage!r}")
    return stage


def _is_stage(stage) -> bool:
    return type(stage) is int and stage in PLANS  # not a bool, not 2.0


def buffer_sizes(plan: Plan, layout) -> dict:
    """{buffer: elements} one rank of `plan` holds on `layout`: Ψ whole or s sharded."""
    return plan.sizes(layout.padded, layout.shard_size)
