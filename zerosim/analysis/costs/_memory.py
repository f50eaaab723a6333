"""Per-rank model-state memory of ZeRO stages 0-3, from named parts.

Letters: Ψ parameters, N ranks (data-parallel degree), K bytes of optimizer state per parameter.

Mixed-precision training keeps, per parameter: a 16-bit compute copy (2 bytes), a 16-bit gradient
(2, or 4 with fp32 gradient accumulation), an fp32 master (4) and the optimizer's state (K bytes,
8 for Adam). The ZeRO paper folds master and state into one K = 12; here they are separate parts, so
the paper's K is `master + K` below. Which parts a stage shards:

    stage 0   nothing (plain data parallel)         (2 + 2 + 4 + K)Ψ
    stage 1   master + optimizer state (P_os)       (2 + 2)Ψ + (4 + K)Ψ/N
    stage 2   ... and gradients (P_os+g)            2Ψ + (2 + 4 + K)Ψ/N
    stage 3   ... and 16-bit parameters (P_os+g+p)  (2 + 2 + 4 + K)Ψ/N

A sharded part holds ceil(Ψ/N) elements per rank, as the engines' flat buffers are zero-padded to a
multiple of N (shard arithmetic from `ShardLayout`, the one place it lives).
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.analysis.costs._rates import check_count
from zerosim.cluster import GB  # noqa: F401 (re-exported: zerosim.analysis.costs.GB)
from zerosim.collectives import ShardLayout
from zerosim.parallel.data import PLANS, Plan, check_stage


@dataclass(frozen=True)
class OptimizerState:
    name: str
    states: tuple  # ((ledger kind, bytes per parameter), ...): the tensors the optimizer keeps

    @property
    def k(self) -> int:
        """K: optimizer-state bytes per parameter (fp32 master not included)."""
        return sum(nbytes for _, nbytes in self.states)


OPTIMIZER_STATES = {  # the state each optimizer keeps, by ledger kind (zerosim.optim.OPTIMIZERS has the optimizers)
    # Adam keeps first and second moments m, v in fp32 (seed 001: "8 bytes/param regardless of the model's precision").
    "adam": OptimizerState("adam", (("optim:m", 4), ("optim:v", 4))),
    # AdamW: the same two moments; decoupled weight decay needs no extra state.
    "adamw": OptimizerState("adamw", (("optim:m", 4), ("optim:v", 4))),
    # Plain SGD: the update is the gradient itself, no state (seed 001: "memory overhead is zero").
    "sgd": OptimizerState("sgd", ()),
    # SGD with momentum: one fp32 momentum buffer.
    "sgd_momentum": OptimizerState("sgd_momentum", (("optim:b", 4),)),
    # Lion: one fp32 momentum, applied through its sign (seed 001: 4 bytes/param, 12 in total).
    "lion": OptimizerState("lion", (("optim:m", 4),)),
    # Adan: m, v (gradient-difference moment), n and the cached previous gradient g_prev, all in fp32, as
    # zerosim/optim/_adan.py keeps them: K = 16 (24 bytes/param at stage 0). Seed 001 counts g_prev at
    # 2 bytes (16-bit, 22 bytes/param): a labelled row of the conventions table (conventions.seed001_adan).
    "adan": OptimizerState("adan", (("optim:m", 4), ("optim:v", 4), ("optim:n", 4), ("optim:g_prev", 4))),
    # Muon: one fp32 momentum per parameter (zerosim's Muon steps every parameter as a matrix).
    "muon": OptimizerState("muon", (("optim:b", 4),)),
    # MuonAdamW: Muon's momentum or AdamW's m in "b", AdamW's v in "v" — as zerosim's ledgers hold them, v over the
    # whole region; DeepSpeed's per-group buffers hold v for the AdamW parameters only (costs/_muon.py counts that).
    "muon_adamw": OptimizerState("muon_adamw", (("optim:b", 4), ("optim:v", 4))),
}

PADDINGS = ("none", "shards", "all")


# the precision presets the formula has byte sizes for, and the MemoryConfig fields each sets (`zerosim memory`'s and
# the explorer's --precision choices): 2-byte params and grads with an fp32 master (the defaults), or seed 002's
# "pure fp32" (4-byte params and grads, no master)
MEMORY_PRECISIONS = {
    "fp16-mixed": {},
    "bf16-mixed": {},
    "fp32": {"param_bytes": 4, "master_bytes": 0, "fp32_grad_accum": True},
}


@dataclass(frozen=True)
class MemoryConfig:
    """What the memory formula counts: the optimizer, byte sizes, fp32 gradient accumulation, padding."""

    optimizer: str = "adam"  # a key of OPTIMIZER_STATES
    param_bytes: int = 2  # 16-bit (fp16/bf16) compute copy of the parameters
    master_bytes: int = 4  # fp32 master weights
    fp32_grad_accum: bool = False  # True: gradients kept (accumulated) in fp32, 4Ψ instead of 2Ψ
    # bytes of one optimizer-state element: 4 (fp32, what OPTIMIZER_STATES counts), or 2 with the state stored in
    # fp16/bf16 (MixedPrecision(optim_state=...)): Adam's K = 8 becomes 4
    state_bytes: int = 4
    # "shards": a sharded part holds ceil(Ψ/N) elements (the engines' padded flat buffers);
    # "none": exactly Ψ/N (the papers' formulas, possibly fractional bytes);
    # "all": every buffer, replicated ones too, holds the padded flat length N*ceil(Ψ/N).
    padding: str = "shards"

    def __post_init__(self):
        if self.optimizer not in OPTIMIZER_STATES:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; known: {sorted(OPTIMIZER_STATES)}")
        if self.state_bytes not in (2, 4):
            raise ValueError(f"state_bytes must be 4 (fp32 state) or 2 (fp16/bf16 state), got {self.state_bytes!r}")
        if self.padding not in PADDINGS:
            raise ValueError(f"padding must be one of {PADDINGS}, got {self.padding!r}")

    @property
    def grad_bytes(self) -> int:
        return 4 if self.fp32_grad_accum else 2

    @classmethod
    def for_precision(cls, precision: str, **fields) -> "MemoryConfig":
        """The byte sizes a precision preset implies (MEMORY_PRECISIONS)."""
        if precision not in MEMORY_PRECISIONS:
            *others, last = MEMORY_PRECISIONS
            raise ValueError(f"no memory formula for precision {precision!r}; choose {', '.join(others)} or {last}")
        return cls(**MEMORY_PRECISIONS[precision], **fields)



@dataclass(frozen=True)
class ModelStateMemory:
    """Bytes one rank holds for model states at one stage, by part. Activations are not included."""

    stage: int
    ranks: int  # N
    params: float  # 16-bit parameters: 2Ψ, or 2Ψ/N at stage 3
    grads: float  # gradients: 2Ψ (4Ψ with fp32 accumulation), /N from stage 2
    master: float  # fp32 master: 4Ψ, /N from stage 1
    optimizer: tuple  # ((ledger kind, bytes), ...): K·Ψ split by tensor, /N from stage 1
    # the ledger kind of the gradient buffer (fp32-accumulated gradients too, as the engines keep them)
    grad_kind: str = "grads"

    @property
    def optimizer_total(self) -> float:
        return sum(b for _, b in self.optimizer)

    @property
    def total(self) -> float:
        return self.params + self.grads + self.master + self.optimizer_total

    @property
    def by_kind(self) -> dict:
        """Bytes per ledger kind (params, grads or grad32, master, optim:<x>), for comparing with a MemoryLedger."""
        return {"params": self.params, self.grad_kind: self.grads, "master": self.master, **dict(self.optimizer)}

    def gb(self) -> float:
        return self.total / GB


def _elements(params: int, ranks: int, sharded: bool, padding: str) -> float:
    """Elements of one part a rank holds: Ψ replicated, ceil(Ψ/N) (or Ψ/N unpadded) sharded."""
    layout = ShardLayout(params, ranks)
    if sharded:
        return layout.shard_size if padding != "none" else params / ranks
    return layout.padded if padding == "all" else params


def model_state_memory(params, ranks: int, stage, config: MemoryConfig | None = None) -> ModelStateMemory:
    """Per-rank model-state bytes at `stage` (0-3, or a `Plan`: what its buffers shard, e.g. no_reshard_no_sync's
    stage-3 shards with whole gradients): the ZeRO paper's (2 + 2 + K)Ψ, sharded stage by stage.

    stage 0: (2 + g + 4 + K)Ψ;  stage 1: (2 + g)Ψ + (4 + K)Ψ/N;  stage 2: 2Ψ + (g + 4 + K)Ψ/N;
    stage 3: (2 + g + 4 + K)Ψ/N, with g = 2 (4 with fp32 gradient accumulation) and K from OPTIMIZER_STATES.
    With Adam, K + 4 = 12 and Ψ = 7.5e9, N = 64 this gives the paper's 120 / 31.4 / 16.6 / 1.9 GB.
    """
    config = config or MemoryConfig()  # defaults: Adam, 16-bit params and grads, fp32 master, padded shards
    psi = check_count(params, "params", 0)  # a whole number >= 0 (not NaN, a bool or 1.5)
    plan = stage if isinstance(stage, Plan) else PLANS[check_stage(stage)]  # N: the shards a sharded buffer is cut in
    ranks = check_count(ranks, "ranks")
    opt = OPTIMIZER_STATES[config.optimizer]
    widths = {  # bytes an element: 16-bit params, 16-bit or fp32 grads, the fp32 master (sharded from stage 1)
        "params": config.param_bytes, "grads": config.grad_bytes, "master": config.master_bytes,
        # each state tensor's fp32 bytes per element, scaled to the storage format's (2 of 4 with 16-bit state)
        **{kind: nbytes * config.state_bytes // 4 for kind, nbytes in opt.states},
    }
    # which parts the stage shards and their bytes: its plan's (parallel/data/_plan.py `bytes_of`), sized here by the
    # formula's own padding convention
    held = plan.bytes_of(_elements(psi, ranks, False, config.padding), _elements(psi, ranks, True, config.padding),
                         widths)
    return ModelStateMemory(stage=plan.stage, ranks=ranks, params=held["params"], grads=held["grads"],
                            master=held["master"], optimizer=tuple((kind, held[kind]) for kind, _ in opt.states))


def model_state_memory_by_stage(params, ranks: int, config: MemoryConfig | None = None) -> tuple:
    """`model_state_memory` for stages 0, 1, 2, 3, in that order."""
    return tuple(model_state_memory(params, ranks, stage, config) for stage in range(4))
