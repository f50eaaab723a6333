"""A training run as library code: a model on a synthetic task, K micro-batches per rank per step.

    result = train(TrainConfig(widths=(16, 64, 64, 4), stage=2, ranks=4, steps=100))
    result.losses[-1], result.ranks[0]["peak_bytes"]
    result = train(TrainConfig(model="gpt", task="reverse", stage=3, ranks=2))   # a GPT on a sequence task
    result.accuracy[-1]                                                            # (step, answer accuracy)

Each rank gets its own micro-batches every step, drawn in order from a fixed pool made by a random
teacher, or of random strings to copy, reverse or sort (so every backend sees the same data and the
MPI run equals the simulator's); `zerosim train` is this function plus argument parsing and printing.
Letters: N ranks, K micro-steps per step (gradient accumulation), V vocabulary, n string length.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from dataclasses import field, fields

import numpy as np

from zerosim._dataclass import dataclass
from zerosim import checkpoint as ckpt
from zerosim.cluster import MAX_UNITS, Cluster, GradClip, available_bytes, check_fits
from zerosim.models import GPT, MLP, answer_positions, make_sequence_task, predict
from zerosim.models.data import TASKS as SEQUENCE_TASKS
from zerosim.models.data import make_classification, make_regression
from zerosim.models.layers import MODES as ATTENTIONS
from zerosim.optim import OPTIMIZERS, SHARDINGS, get_optimizer
from zerosim.parallel.data import CommSchedule, ZeroEngine, check_engine_fits, get_plan
from zerosim.precision import get_precision
from zerosim.progress import progress, watched

TASKS = ("regression", "classification")  # the MLP's; the GPT's are SEQUENCE_TASKS: copy, reverse, sort
MODELS = ("mlp", "gpt", "llama")  # gpt and llama: decoders over token ids that learn the sequence tasks
EVAL_SEQUENCES = 256  # held-out strings the GPT's answer accuracy is measured on (a 1/√256 ≈ 6% standard error at most)


TRACE_STEPS = 2  # the steps a run's trace holds: the one running and the one before (its last refresh's handle)


@dataclass(frozen=True)
class TrainConfig:
    """What to train, where, and how (every field has the CLI's default)."""

    widths: tuple = (16, 64, 64, 4)  # MLP layer sizes, input first
    task: str | None = None  # MLP: "regression" (default) or "classification"; GPT: "copy" (default), "reverse", "sort"
    # None below: the saved run's value when resuming, else the default in RUN_DEFAULTS (the resume rule: what
    # you leave out continues the saved run; a stage or rank count you give reshards; a precision or optimizer kind
    # other than the saved one is refused, as ZeroEngine.load refuses it; so are a seed, batch or task other than
    # the data the saved run trained on, DATA_FIELDS, which its checkpoints record)
    stage: int | None = None  # ZeRO stage (2)
    ranks: int | None = None  # N (4)
    backend: str = "numpy"  # "numpy", "mpi" or "cupy"
    backend_options: dict = field(default_factory=dict)  # e.g. {"native": True} for MPI's own reduce-scatter
    precision: object = None  # a preset name or a MixedPrecision ("bf16-mixed")
    optimizer: str | None = None  # ("adam")
    optimizer_options: dict = field(default_factory=dict)  # its hyperparameters besides lr (betas, eps, weight_decay,
    #                                                         formula: a DeepSpeed config's), {} for its defaults
    muon_sharding: str | None = None  # Muon's way of sharding at stages 1-3 (optim.SHARDINGS); None: its default
    lr: float | None = None  # (1e-2)
    steps: int = 100
    batch: int | None = None  # samples per micro-batch (16)
    accumulation_steps: int | None = None  # K (1)
    seed: int | None = None  # data (seed) and initial weights (seed + 1) (0)
    checkpoint: bool = False
    save: str | None = None  # a folder to save checkpoints into (zerosim.checkpoint)
    save_every: int = 0  # save after every this many steps (0: only at the end, when `save` is given)
    resume: str | None = None  # a checkpoint folder to continue from; `steps` counts from the start of the run
    trace_log: str | None = None  # a file to stream the whole trace log into (the run itself holds only its last steps)
    overwrite: bool = False  # `save` holds another run's checkpoints: remove them at the first save (else refused)
    # model="gpt": a small GPT learns a sequence task (models/data/_sequences.py); these defaults learn copy in ~80
    # steps
    model: str = "mlp"  # "mlp", "gpt" or "llama" (RMSNorm, grouped-query attention with rotary embeddings, SwiGLU)
    vocab: int = 6  # V: V - 1 symbols and the separator (chance is 1/(V - 1) per answer token)
    length: int = 3  # n: strings of n symbols; a sequence is 2n tokens
    d_model: int = 16
    heads: int = 2
    layers: int = 1  # transformer blocks
    attention: str = "standard"  # or "selective", "flash" (checkpoint=True keeps each block's input: "block")
    kv_heads: int | None = None  # llama: key/value heads (grouped-query attention; None: one per query head)
    eval_every: int = 10  # the GPT's answer accuracy on held-out strings, every this many steps (and first, last)
    clip_grad: float | None = None  # clip the gradient to this global norm (torch's max_norm), or None
    offload: object = None  # a parallel.offload.Offload: the optimizer (and params) on host / NVMe, or None
    tp: int = 1  # tensor parallelism's degree (gpt, llama): T consecutive ranks split every layer; dp = ranks / T
    sp: bool = False  # with tp > 1: Megatron's sequence parallelism
    comm: object = None  # a parallel.data.CommSchedule (buckets, prefetch: a DeepSpeed config's), or None (seed 004's)
    # with tp > 1: what a TP rank keeps for backward (parallel/tensor LAYOUTS); no bit moves
    tp_layout: str = "megatron"
    cp: int = 1  # context parallelism's degree (gpt, llama with attention="flash"): each rank 1/C of every sequence
    cp_style: str = "ring"  # with cp > 1: "ring" (the K/V sent hop by hop), "allgather" or "torch" (torch's own)
    cp_split: str = "zigzag"  # with cp > 1: "zigzag" (load-balanced) or "contiguous"

    def __post_init__(self):
        self._check_paths()  # before a resume reads anything
        self._fill_from_resume()
        self._check_model()
        self._check_transformer()
        self._check_counts()
        self._check_run_flags()
        self._check_engine_options()
        self._check_tensor()
        self._check_context()

    def _check_paths(self) -> None:
        """The paths (save, resume, trace_log), and a trace log never written into a checkpoint."""
        for name in ("save", "resume", "trace_log"):  # paths, checked before a resume reads anything
            value = getattr(self, name)
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise ValueError(f"{name} must be None or a path, got {value!r}")
        if self.trace_log is not None:  # before a resume reads anything: never into a checkpoint (zerosim/outputs.py)
            from zerosim.outputs import check_file, refuse_inside

            check_file(self.trace_log, "trace_log")
            if self.save is not None:
                refuse_inside(self.trace_log, "trace_log", self.save, "save")

    def _fill_from_resume(self) -> None:
        """The unset fields from the saved run (its data refused if other than given) or the defaults (RUN_DEFAULTS)."""
        saved = {} if self.resume is None else ckpt.saved_data(self.resume)  # the data the saved run trained on
        for name in DATA_FIELDS:
            given = getattr(self, name)
            if name in saved and given is not None and given != saved[name]:  # the same run on other data: refused
                raise ValueError(f"{name} {given!r} (--{name} {given}): the checkpoint in {self.resume} was trained "
                                 f"with {name} {saved[name]!r} (its manifest's data.{name}); a resumed run continues "
                                 f"on the same data: leave {name} out (or give {saved[name]!r}), or start a new run "
                                 "without resuming")
            if given is None and name in saved:
                object.__setattr__(self, name, saved[name])
        for name, value in run_defaults(self.resume).items():  # the saved run's settings, or the defaults
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)

    def _check_model(self) -> None:
        """The model, every field `train` reads, and the model's task (its default if unset)."""
        if not isinstance(self.model, str) or self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        self._check_fields()
        tasks = TASKS if self.model == "mlp" else SEQUENCE_TASKS
        object.__setattr__(self, "task", tasks[0] if self.task is None else self.task)  # the model's default task
        if self.task not in tasks:
            other = (
                "the GPT learns copy, reverse or sort"
                if self.model == "mlp"
                else "the MLP learns regression or classification"
            )
            raise ValueError(f"task must be one of {tasks} for model {self.model!r}, got {self.task!r} ({other})")

    def _check_transformer(self) -> None:
        """A GPT's or Llama's sizes: positive, a vocabulary of 3 at least, not too many blocks (an MLP's run holds
        them too: a wrong one is refused, not left unread)."""
        for name in ("vocab", "length", "d_model", "heads", "layers", "eval_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.vocab < 3:
            raise ValueError(f"vocab must be at least 3 (two symbols and the separator), got {self.vocab}")
        if self.layers + 2 > MAX_UNITS:  # before the model is built, which visits every block in Python
            raise ValueError(f"layers {self.layers:,} (--layers): the model would have {self.layers + 2:,} units "
                             f"(blocks and ends); zerosim takes at most {MAX_UNITS:,}: each is built and stepped "
                             "one by one")

    def _check_counts(self) -> None:
        """Steps, batch, ranks and K: positive, and within what the numpy backend runs in one process."""
        for name in ("steps", "batch", "ranks", "accumulation_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.backend == "numpy" and self.ranks > MAX_SIMULATED_RANKS:
            raise ValueError(f"ranks must be at most {MAX_SIMULATED_RANKS} on the numpy backend, got {self.ranks}: it "
                             "runs every rank in this process (the meta backend accounts more: zerosim memory, "
                             "zerosim timeline)")
        if self.backend == "numpy" and self.ranks * self.accumulation_steps > MAX_STEP_MICRO_BATCHES:
            raise ValueError(f"one step would run {self.ranks * self.accumulation_steps:,} micro-batches "
                             f"({self.accumulation_steps:,} accumulation steps on each of {self.ranks:,} ranks), "
                             f"each a forward and backward pass, before its loss is printed; zerosim trains at most "
                             f"{MAX_STEP_MICRO_BATCHES:,} a step: lower --accumulation-steps (or raise --batch)")

    def _check_run_flags(self) -> None:
        """Checkpointing, the seed, and what saving may do (save_every, overwrite)."""
        if not isinstance(self.checkpoint, (bool, np.bool_)):  # bool("no") is True: refused, not read as yes
            raise ValueError(f"checkpoint must be True or False, got {self.checkpoint!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        if (
            isinstance(self.save_every, bool)
            or not isinstance(self.save_every, (int, np.integer))
            or self.save_every < 0
        ):
            raise ValueError(f"save_every must be an integer >= 0, got {self.save_every!r}")
        if self.save_every and self.save is None:
            raise ValueError("save_every needs a folder to save into (save=...)")
        if not isinstance(self.overwrite, (bool, np.bool_)):
            raise ValueError(f"overwrite must be True or False, got {self.overwrite!r}")
        if self.overwrite and self.save is None:
            raise ValueError("overwrite says what a save may remove: it needs a folder to save into (save=...)")

    def _check_engine_options(self) -> None:
        """The engine's options: Muon's sharding, offload, the optimizer's hyperparameters, the comm schedule."""
        if self.muon_sharding is not None and not get_plan(self.stage).shards("optimizer"):  # whole matrices
            raise ValueError(f"muon_sharding (--muon-sharding {self.muon_sharding}) says how ZeRO stages 1-3 bring "
                             f"Muon's sharded matrices together; at stage {self.stage} every rank holds them whole, so "
                             "it would change nothing: drop it, or give stage 1, 2 or 3")
        takes = [name for name, cls in OPTIMIZERS.items() if "sharding" in cls.__dataclass_fields__]
        if self.muon_sharding is not None and str(self.optimizer).lower() not in takes:
            raise ValueError(f"muon_sharding (--muon-sharding {self.muon_sharding}) says how Muon's matrices are "
                             f"brought together; optimizer {self.optimizer!r} is not Muon: give --optimizer "
                             f"{' or '.join(takes)}, or drop it")
        if self.offload is not None:
            from zerosim.parallel.offload import Offload

            if not isinstance(self.offload, Offload):
                raise ValueError(f"offload must be a zerosim.parallel.offload.Offload or None, got {self.offload!r}")
            if self.save is not None or self.resume is not None:
                raise ValueError("checkpoints of an offloaded run are not modelled (the host's states and DPU's "
                                 "pending params are not saved): drop offload or --save / --resume")
            if self.backend != "numpy":
                raise ValueError("offload runs on the numpy backend (its host tier is simulated there)")
            if self.tp > 1 or self.sp:
                raise ValueError("offload beside tensor parallelism is not modelled: drop offload or tp / sp")
        if not isinstance(self.optimizer_options, dict) or "lr" in self.optimizer_options:
            raise ValueError(f"optimizer_options must be a dict of the optimizer's hyperparameters besides lr, got "
                             f"{self.optimizer_options!r}")
        if self.comm is not None and not isinstance(self.comm, CommSchedule):
            raise ValueError(f"comm must be a zerosim.parallel.data.CommSchedule or None, got {self.comm!r}")
        if self.comm is not None and self.resume is not None:
            raise ValueError("comm sets a new run's buckets and prefetch; a resumed run keeps its checkpoint's: drop "
                             "comm or resume")

    def _check_tensor(self) -> None:
        """Tensor parallelism's degree and sequence parallelism, and where they run."""
        if isinstance(self.tp, bool) or not isinstance(self.tp, (int, np.integer)) or self.tp < 1:
            raise ValueError(f"tp must be a positive integer, got {self.tp!r}")
        if not isinstance(self.sp, (bool, np.bool_)):  # bool("no") is True: refused, not read as yes
            raise ValueError(f"sp must be True or False, got {self.sp!r}")
        if self.sp and self.tp == 1:
            raise ValueError("sp cuts the sequence over a TP group: give tp > 1 with it")
        if self.tp > 1:
            why = ("tensor parallelism splits a transformer's heads, columns and vocabulary: use model 'gpt' or "
                   "'llama'" if self.model == "mlp" else
                   f"tensor parallelism runs on the numpy backend here, not {self.backend!r}" if self.backend != "numpy"
                   else f"tp = {self.tp} does not divide ranks = {self.ranks}" if self.ranks % self.tp else
                   "checkpoints of tensor-parallel slices are not written or read yet: drop save / resume"
                   if self.save or self.resume else None)
            if why:
                raise ValueError(why)

    def _check_context(self) -> None:
        """Context parallelism's choices, checked by its own rules (zerosim.parallel ParallelSpec, parallel/context)."""
        from zerosim.parallel import ParallelSpec

        spec = ParallelSpec(tp=self.tp, sp=self.sp, cp=self.cp, cp_style=self.cp_style, cp_split=self.cp_split)
        spec.check(self.ranks if self.backend == "numpy" else None)
        if self.clip_grad is not None and (self.tp > 1 or self.cp > 1) and self.backend == "numpy":
            from zerosim.parallel.data.multinode import refuse_beside  # the engine's own rule, in the field's words

            refuse_beside(spec.dims(self.ranks), self.clip_grad, clip_words=f"clip_grad {self.clip_grad} (--clip-grad)")
        if self.cp == 1:
            return
        why = ("context parallelism cuts a transformer's sequences: use model 'gpt' or 'llama'" if self.model == "mlp"
               else f"context parallelism runs on the numpy backend here, not {self.backend!r}"
               if self.backend != "numpy" else
               "checkpoints of context-parallel runs are not written or read yet: drop save / resume"
               if self.save or self.resume else
               "offload beside context parallelism is not modelled: drop offload or cp" if self.offload else None)
        if why:
            raise ValueError(why)
        spec.model_check(2 * self.length, self.attention, "block" if self.checkpoint else "none", meta=False)


    def _check_fields(self) -> None:
        """Every field `train` reads, checked where the config is born (a wrong one would fail later, or not at all:
        an MLP's widths of 1.5, an attention it does not know, a NaN learning rate)."""
        widths = self.widths
        if not isinstance(widths, (tuple, list)) or len(widths) < 2 or any(
                isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1 for w in widths):
            raise ValueError(f"widths must be at least two layer sizes, each an integer >= 1, got {widths!r}")
        get_plan(self.stage)  # a stage (0-3) or a strategy's name, else a ValueError naming them
        get_optimizer(self.optimizer)  # a known name, else a ValueError naming them
        get_precision(self.precision)
        from zerosim.parallel.tensor import LAYOUTS

        for name, value, ok, want in (
            ("lr", self.lr, _real(self.lr) and math.isfinite(self.lr) and self.lr >= 0, "a finite number >= 0"),
            ("clip_grad", self.clip_grad, self.clip_grad is None or (_real(self.clip_grad) and math.isfinite(
                self.clip_grad) and self.clip_grad > 0), "None or a finite number > 0"),
            ("kv_heads", self.kv_heads, self.kv_heads is None or (not isinstance(self.kv_heads, bool) and isinstance(
                self.kv_heads, (int, np.integer)) and self.kv_heads >= 1), "None or an integer >= 1"),
            ("attention", self.attention, self.attention in ATTENTIONS, f"one of {ATTENTIONS}"),
            ("backend", self.backend, self.backend in BACKENDS, f"one of {BACKENDS}"),
            ("backend_options", self.backend_options, isinstance(self.backend_options, dict), "a dict"),
            ("tp_layout", self.tp_layout, isinstance(self.tp_layout, str) and self.tp_layout in LAYOUTS,
             f"one of {tuple(LAYOUTS)}"),
            ("muon_sharding", self.muon_sharding, self.muon_sharding is None or self.muon_sharding in SHARDINGS,
             f"None or one of {SHARDINGS}"),
        ):
            if not ok:
                raise ValueError(f"{name} must be {want}, got {value!r}")


def _real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


BACKENDS = ("numpy", "mpi", "cupy")


# The numpy backend hosts every rank in this process and a ring over N ranks moves N·(N-1) chunks per collective:
# 2048 ranks take ~7 s a step here. Past this, refuse at once (100,000 ranks ran 99 s, then ran out of memory).
MAX_SIMULATED_RANKS = 4096
# K · N micro-batches a step runs on the numpy backend before anything is printed: past this a step takes minutes of
# silence (K = 100,000 on 4 ranks ran past 20 s with no output and would take ~10 minutes here). Refused up front.
MAX_STEP_MICRO_BATCHES = 1 << 16
RUN_DEFAULTS = {"stage": 2, "ranks": 4, "precision": "bf16-mixed", "optimizer": "adam", "lr": 1e-2,
                "accumulation_steps": 1, "seed": 0, "batch": 16}
# What a run's micro-batches are drawn from (the pool's seed, the samples per micro-batch, the task): recorded in its
# checkpoints ("data"), so that a resume with another is refused rather than run as the same run on other data
DATA_FIELDS = ("seed", "batch", "task")


def run_defaults(resume: str | None) -> dict:
    """What TrainConfig's unset fields become: RUN_DEFAULTS, or when resuming the checkpoint's own stage, rank
    count, precision policy, optimizer, learning rate and K (read from its manifest, checked)."""
    if resume is None:
        return dict(RUN_DEFAULTS)
    return {"seed": RUN_DEFAULTS["seed"], "batch": RUN_DEFAULTS["batch"], **ckpt.saved_settings(resume)}


def _check_ranks_agree(cluster, config: TrainConfig) -> None:
    """Under MPI each process parsed its own arguments: refuse, naming the field, if they differ."""
    if cluster.local_size == cluster.world_size:
        return  # one process hosts every rank: one config
    mine = {f.name: getattr(config, f.name) for f in fields(config)}
    everyone = cluster.backend.all_meta([mine])
    for name in mine:
        values = [c[name] for c in everyone]
        if any(v != values[0] for v in values):
            held = ", ".join(f"rank {r} has {v!r}" for r, v in enumerate(values))
            raise ValueError(f"the ranks disagree on {name} (--{name.replace('_', '-')}): {held}")


@dataclass
class TrainResult:
    """The mean loss after each step, and each rank's memory and traffic at the end (rank order)."""

    losses: list  # the mean loss of steps first_step, first_step + 1, ..., steps
    ranks: list  # [{"rank", "peak_bytes", "peak_by_kind", "bytes_sent"}] for every rank of the world
    params: int
    first_step: int = 1  # > 1 when the run resumed from a checkpoint
    accuracy: list = field(default_factory=list)  # GPT: [(step, answer accuracy on held-out strings)]
    chance: float | None = None  # GPT: 1/(V - 1), the accuracy of a guess
    scales: list = field(default_factory=list)  # the loss scale each step's loss was multiplied by
    skipped: list = field(default_factory=list)  # the steps the loss scaler skipped (an inf/NaN gradient)
    norms: list = field(default_factory=list)  # the global gradient norm of each step that clipped (None: skipped)
    saved: list = field(default_factory=list)  # the checkpoint folders this run wrote (`save`'s), oldest first


@dataclass(frozen=True)
class StepInfo:
    """What `on_step` hears besides the loss: the loss scale the step used, whether the scaler skipped it,
    and the global gradient norm when clipping (None otherwise, or when skipped)."""

    scale: float
    skipped: bool
    norm: float | None


def build_model(config: TrainConfig):
    """The model `config` describes: an MLP of `widths`, or a GPT sized for its sequence task."""
    if config.model == "gpt":
        return GPT(config.vocab, config.d_model, config.heads, config.layers, 2 * config.length,
                   attention=config.attention, checkpoint="block" if config.checkpoint else "none")
    if config.model == "llama":
        from zerosim.models.llama import Llama

        return Llama(config.vocab, config.d_model, config.heads, config.layers, 2 * config.length,
                     n_kv_heads=config.kv_heads, rope_theta=100.0,  # short sequences: a small base turns them apart
                     attention=config.attention, checkpoint="block" if config.checkpoint else "none")
    return MLP([int(w) for w in config.widths], loss="xent" if config.task == "classification" else "mse")


def run_model(config: TrainConfig):
    """The model a run of `config` trains: `build_model`'s, its vocabulary padded as Megatron pads it when tensor
    parallelism does not split it (parallel/tensor/_vocab.py: another model, with other initial weights)."""
    model = build_model(config)
    if config.tp > 1:
        from zerosim.parallel.tensor import padded_model

        model = padded_model(model, config.tp)
    return model


def answer_accuracy(model, engine, held_out, fmt, tensor=None) -> float | None:
    """How often the GPT's most likely token is the answer a_1..a_n (models/data/_sequences.py), on held-out strings,
    with the 16-bit params the ranks compute with (beside TP: the TP ranks' slices joined into the whole model).
    None when no process holds them all (stage 3 under MPI)."""
    if engine.plan.shards("params") and engine.cluster.local_size < engine.cluster.world_size:
        return None
    x, target = held_out  # (S, 2n) ids and next tokens
    whole = engine.full_params() if tensor is None else tensor.whole_params(engine.ctx)
    guess = predict(model, whole, x, fmt).argmax(-1)  # (S, 2n)
    answer = answer_positions(x.shape[1] // 2)
    return float(np.mean(guess[:, answer] == target[:, answer]))


def train(config: TrainConfig, on_step=None, on_start=None, on_eval=None, observer=None,
          show_progress: bool | None = None) -> TrainResult:
    """Run up to step `config.steps`; `on_start(num_params, first_step)` is called once every check has
    passed, before the first step, and `on_step(step, mean_loss, StepInfo)` after each (headers, progress bars);
    for a GPT, `on_eval(step, accuracy)` after the steps its answer accuracy is measured at.

    `show_progress`: a bar of the steps (zerosim.progress: a widget in Jupyter, on stderr in a terminal, drawn once
    the run has taken a second); None shows it where someone is watching, from the process hosting rank 0 (`zerosim
    train` draws its own, beside the losses, and passes False).

    `observer` (None: nothing is recorded, the run as it is) watches the run from outside the engine, as
    `zerosim.diff` does: its `cluster_options` (a dict) go to the Cluster (e.g. a trace that keeps values), then
    `observer.start(engine, tensor)` before the first step (`tensor`: the TensorParallel, or None) and
    `observer.step(step, engine, since, ids, batches)` after each, where `since` is the trace's log position the
    step began at, `ids[i][j]` the place among the step's micro-batches of local rank i's j-th micro-batch, and
    `batches[i][j]` that micro-batch.

    Under MPI every process calls this; each returns the same losses and every rank's statistics.
    """
    gpt = config.model in ("gpt", "llama")
    model = run_model(config)
    optimizer = _run_optimizer(config, model)
    cluster = _run_cluster(config, observer)
    engine, tensor, context = _run_engine(config, cluster, model, optimizer)
    if config.save is not None:  # before any step: a folder that cannot hold this run's checkpoints is refused now
        ckpt.check_save(engine, config.save, bool(config.overwrite))
    n, k = config.ranks // (config.tp * config.cp), config.accumulation_steps  # the data-parallel ranks draw
    per_step = n * k  # micro-batches a step consumes
    pool_size = per_step * min(config.steps, 32)  # a fixed pool of micro-batches, cycled
    pool, held_out, fmt = _run_data(config, cluster, pool_size)
    first = engine.iteration + 1  # 1, or the step after a resumed checkpoint's
    if on_start is not None:
        on_start(model.num_params, first)
    if observer is not None:
        observer.start(engine, tensor)
    losses, accuracy, scales, skipped, norms, saved = [], [], [], [], [], []
    shown = (watched() if show_progress is None else show_progress) and cluster.ranks[0].index == 0
    steps = range(engine.iteration + 1, config.steps + 1)  # steps the loss scaler skips count too, as in DeepSpeed
    for step in progress(steps, "training", enabled=shown, unit="step"):  # (the bar closes as the loop ends)
        ids, mine = _step_batches(engine, cluster, context, pool, ((step - 1) * per_step) % pool_size, n, k)
        scales.append(engine.scaler.scale)
        t, since = engine.t, cluster.trace.logged  # an absolute log position: the steps before may fold
        local = engine.step(mine)
        if observer is not None:
            observer.step(step, engine, since, ids, mine)
        if engine.t == t:
            skipped.append(step)
        if config.clip_grad is not None:
            clipped = cluster.trace.of_type(GradClip, since)
            norms.append(clipped[-1].norm if clipped else None)
        every = [x for part in cluster.backend.all_meta([local]) for x in part] if cluster.local_size == 1 else local
        losses.append(float(np.mean(np.asarray(every, dtype=np.float64))))
        if on_step is not None:
            on_step(step, losses[-1], StepInfo(scales[-1], step in skipped[-1:], norms[-1] if norms else None))
        if gpt and (step % config.eval_every == 0 or step in (first, config.steps)):
            _evaluate(model, engine, held_out, fmt, tensor, step, accuracy, on_eval)
        if config.save is not None and ((config.save_every and step % config.save_every == 0) or step == config.steps):
            saved.append(ckpt.save(engine, config.save, overwrite=bool(config.overwrite),
                                   data={name: getattr(config, name) for name in DATA_FIELDS}))
    cluster.trace.flush_log()
    return TrainResult(losses, _rank_stats(config, cluster), model.num_params, first, accuracy,
                       1 / (config.vocab - 1) if gpt else None, scales, skipped, norms, saved)


def _run_optimizer(config: TrainConfig, model):
    """The run's optimizer (Muon's sharding, an offloaded Adam as DeepSpeed steps it), checked against the stage and
    against the memory the engine would take, before any rank exists."""
    more = {} if config.muon_sharding is None else {"sharding": config.muon_sharding}  # a non-Muon optimizer refuses it
    if config.offload is not None:  # DeepSpeed steps an offloaded Adam as DeepSpeedCPUAdam (parallel/offload)
        from zerosim.parallel.offload import host_optimizer

        more |= host_optimizer(config.offload.placement, config.optimizer)
    optimizer = get_optimizer(config.optimizer, lr=config.lr, **config.optimizer_options, **more)
    optimizer.check_stage(get_plan(config.stage).stage)  # a strategy is a stage-3 plan
    local = config.ranks if config.backend == "numpy" else 1  # ranks this process will host
    # before any rank exists
    check_engine_fits(model, config.ranks, local, config.stage, optimizer, config.precision, available_bytes())
    return optimizer


def _run_cluster(config: TrainConfig, observer):
    """The ranks, with a trace that holds the last steps only, and the check that every process was given the same
    config."""
    if config.trace_log is not None and config.backend != "numpy":
        raise ValueError(f"--trace-log streams one process's trace: run it on the numpy backend (every rank in this "
                         f"process), not {config.backend!r}")
    # the trace holds the last steps only (what a step reads of it: its own events), the whole run's bytes in its
    # summary: 10,000 steps in the memory of a few (cluster/_window.py); the whole log streamed if asked
    options = dict(trace="call", timeline=False, keep_steps=TRACE_STEPS, log_to=config.trace_log)
    options |= {} if observer is None else observer.cluster_options  # e.g. a trace that keeps values
    cluster = Cluster(config.ranks, backend=config.backend, **options, **config.backend_options)
    _check_ranks_agree(cluster, config)
    return cluster


def _run_engine(config: TrainConfig, cluster, model, optimizer):
    """The engine, loaded from `config.resume` (resharded to this run's ranks and stage) or started from the seed's
    weights, and the TensorParallel (tp > 1) and ContextParallel (cp > 1) beside it (None where absent)."""
    tensor = context = None
    if config.resume is not None:  # the saved state, on this run's ranks and stage (resharded if they differ)
        saved = ckpt.saved_optimizer(config.resume)
        if saved.name == optimizer.name:  # the saved hyperparameters (betas, eps, ...), with this run's lr
            optimizer = dataclasses.replace(saved, lr=config.lr)
        engine = ckpt.load(config.resume, cluster, model, optimizer, stage=config.stage, precision=config.precision,
                           accumulation_steps=config.accumulation_steps, checkpoint=config.checkpoint,
                           clip_grad=config.clip_grad)
        if engine.iteration >= config.steps:
            raise ValueError(f"the checkpoint in {config.resume} is at step {engine.iteration}; --steps {config.steps} "
                             "asks for no more")
        return engine, tensor, context
    params = model.init_params(np.random.default_rng(config.seed + 1))
    if config.tp > 1:  # each rank starts from its TP slice of the whole model's weights
        from zerosim.parallel.tensor import TensorParallel

        tensor = TensorParallel(model, config.tp, config.sp, params=params, layout=config.tp_layout)
    beside = () if tensor is None else (tensor,)
    if config.cp > 1:  # each rank its tokens of every sequence: the whole model's weights (TP's slice beside TP)
        from zerosim.parallel.context import ContextParallel

        context = ContextParallel(model, config.cp, config.cp_style, config.cp_split, tensor=tensor)
        beside = context.parallelisms
    engine = ZeroEngine(
        beside[-1].model if beside else model,
        cluster,
        config.stage,
        optimizer,
        config.precision,
        checkpoint=config.checkpoint,
        params=params if tensor is None else None,
        accumulation_steps=config.accumulation_steps,
        clip_grad=config.clip_grad,
        parallelisms=tuple(p for p in (*beside, config.offload) if p is not None),
        comm=config.comm,
    )
    return engine, tensor, context


def _run_data(config: TrainConfig, cluster, pool_size: int):
    """The fixed pool of micro-batches the steps cycle through, checked to fit beside the activations; for a GPT also
    the held-out strings and the compute format its accuracy is measured with (None, None for an MLP)."""
    widths = [int(w) for w in config.widths]
    classify, gpt = config.task == "classification", config.model in ("gpt", "llama")
    if gpt:  # (pool, B, 2n) int64 ids and targets; a rank's activations per layer: B·2n·(16d + H·2n) values, ≤ 8 bytes
        L = 2 * config.length
        need = (pool_size + EVAL_SEQUENCES) * config.batch * L * 16 + cluster.local_size * config.batch * L * 8 * (
            (config.layers + 1) * (16 * config.d_model + config.heads * L) + 2 * config.vocab)
    else:  # (pool, B, D_in) fp32 inputs, (pool, B, D_out) fp32 targets (int64 labels), and each rank's
        # activations while it runs: about B * sum(widths) values per rank in fp32, forward and backward
        per_sample = 4 * widths[0] + (8 if classify else 4 * widths[-1])
        need = pool_size * config.batch * per_sample + cluster.local_size * config.batch * 2 * 4 * sum(widths)
    check_fits(need, f"the data pool ({pool_size:,} micro-batches of {config.batch:,} samples) and activations",
               "use a smaller --batch or fewer --ranks", cluster.backend.available_bytes())
    if not gpt:
        make = make_classification if classify else make_regression
        return make(np.random.default_rng(config.seed), pool_size, config.batch, widths), None, None
    # random strings to copy, reverse or sort; held-out ones from their own stream, for the accuracy
    pool = make_sequence_task(
        np.random.default_rng(config.seed), pool_size, config.batch, config.length, config.vocab, config.task
    )
    held_out = make_sequence_task(
        np.random.default_rng(config.seed + 2), 1, EVAL_SEQUENCES, config.length, config.vocab, config.task
    )[0]
    return pool, held_out, get_precision(config.precision).compute_format


def _step_batches(engine, cluster, context, pool, base: int, n: int, k: int):
    """A step's micro-batches from `pool[base:]`: `ids[i][j]`, the place among the step's N·K of local rank i's j-th,
    and `mine[i][j]`, that micro-batch (beside CP: the rank's tokens of it)."""
    data = engine.dims.groups("dp")  # a TP group's ranks train on their data-parallel rank's micro-batches
    ids = [[data.position(r.index) * k + j for j in range(k)] for r in cluster.ranks]  # places among the N·K
    mine = [[pool[base + i] for i in row] for row in ids]
    if context is not None:  # each CP rank its tokens of its data-parallel rank's sequences (cut as CP cuts)
        mine = context.batches(engine.dims, [[pool[base + d * k + j] for j in range(k)] for d in range(n)])
    return ids, mine


def _evaluate(model, engine, held_out, fmt, tensor, step: int, accuracy: list, on_eval) -> None:
    """The GPT's answer accuracy after `step`, appended to `accuracy` and told to `on_eval` (nothing where no process
    holds the whole params)."""
    acc = answer_accuracy(model, engine, held_out, fmt, tensor)
    if acc is not None:
        accuracy.append((step, acc))
        if on_eval is not None:
            on_eval(step, acc)


def _rank_stats(config: TrainConfig, cluster) -> list:
    """Every rank's peak memory (by kind, and the host's when offloading) and bytes sent, gathered from every
    process."""
    return cluster.backend.all_meta(
        [
            {
                "rank": r.index,
                "peak_bytes": r.ledger.peak(),
                "peak_by_kind": r.ledger.peak_by_kind(),
                "bytes_sent": cluster.trace.bytes_sent(r.index),
                **({} if config.offload is None else {"host_peak_bytes": r.ledger_of("host").peak()}),
            }
            for r in cluster.ranks
        ]
    )
