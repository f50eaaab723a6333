"""The parallelisms beside data parallelism that one job asks for, by name, in one record: `ParallelSpec`.

What the commands' parallel flags say (cli/parallel_args.py), what the meta engines, the timeline and the planner build
a job's model from, and what a printed command that reproduces a planned row carries. Its degrees are `ParallelDims`'
(_dims.py: they multiply, with the data-parallel ones, to the world size); its options belong to the parallelism they
name:

    tp, sp, tp_layout, async_tp     tensor parallelism (parallel/tensor): Megatron's column and row layers over T
                                    consecutive GPUs, sequence parallelism, what a TP rank keeps, async TP's bound
    cp, cp_style, cp_split          context parallelism (parallel/context): each rank 1/C of every sequence, the K/V
                                    round a ring or all-gathered, sequences cut contiguously or in the zigzag
    pp, pp_schedule, virtual_stages, pp_split
                                    pipeline parallelism (parallel/pipeline): the layers cut into P stages (P·V with
                                    virtual stages) by torchtitan's rule or Megatron's, the micro-batches driven
                                    through the schedule's table

`spec.check(world_size)` checks every choice once, in the words of whoever made it (`names`: the API's field names,
or the command line's flags); `spec.model_check(...)` what the model's shape and strategy must allow;
`spec.build(model)` the model the engine runs and the parallelisms beside it; `spec.micro(B, L)` a rank's share of a
micro-batch; `spec.pipeline_check(M, stage, recipe)` what a pipeline's schedule and the frameworks allow with M
micro-batches a step (Megatron's num_microbatches: `--accumulation-steps`) at a ZeRO stage.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.parallel._dims import ParallelDims

API = {}  # how the library names each field: by itself
FLAGS = {  # how the command line names them
    "tp": "--tp", "sp": "--sp", "tp_layout": "--tp-layout", "async_tp": "--async-tp", "cp": "--cp",
    "cp_style": "--cp-style", "cp_split": "--cp-split", "pp": "--pp", "pp_schedule": "--pp-schedule",
    "virtual_stages": "--virtual-stages", "pp_split": "--pp-split", "world_size": "--ranks", "kernels": "--kernels",
    "micro_batches": "--accumulation-steps", "stage": "--stage"}
DEGREES = ("tp", "cp", "pp")  # the fields that are ParallelDims' degrees, in its names
LETTERS = {"tp": "T", "cp": "C", "pp": "P"}  # each degree's letter, as the flags' help writes it


@dataclass(frozen=True)
class ParallelSpec:
    """The parallelisms beside data parallelism of one job (see the module docstring). Every default is "not asked
    for": `ParallelSpec()` is data parallelism alone, every bit and call as without it."""

    tp: int = 1  # T: tensor parallelism's degree, innermost on the mesh
    sp: bool = False  # with tp > 1: Megatron's sequence parallelism
    tp_layout: str | None = None  # with tp > 1: what a TP rank keeps (parallel/tensor LAYOUTS); None: the default
    async_tp: bool = False  # with tp > 1: TP's collectives overlapping the GEMMs they feed (a bound, timeline only)
    cp: int = 1  # C: context parallelism's degree, each rank 1/C of every sequence
    cp_style: str = "ring"  # with cp > 1: "ring" (Transformer Engine's p2p), "allgather" (Llama 3's) or "torch"
    cp_split: str = "zigzag"  # with cp > 1: "zigzag" (load-balanced) or "contiguous"
    pp: int = 1  # P: pipeline parallelism's degree, outermost on the mesh (a stage a block of N / P ranks)
    pp_schedule: str = "1f1b"  # with pp > 1: the schedule's table (parallel/pipeline SCHEDULES; torchtitan's default)
    virtual_stages: int | None = None  # with pp > 1: V stages a rank; None: the schedule's (1, or 2 interleaved)
    pp_split: str = "torchtitan"  # with pp > 1: where the layers are cut (parallel/pipeline RULES)

    def check(self, world_size: int | None = None, names: dict = API, given=None) -> "ParallelSpec":
        """Every choice checked, naming it as `names` spells it (FLAGS on the command line): the world's size (None:
        not known yet) and the degrees positive integers, their product dividing the world, each option only beside
        its degree (`given`: the options the caller set, default those not at their default), the combinations
        zerosim does not model refused. Returns itself."""
        def name(field):
            return names.get(field, field)

        world = {} if world_size is None else {"world_size": world_size}
        for field, value in {**{d: getattr(self, d) for d in DEGREES}, **world}.items():
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name(field)} must be a positive integer, got {value!r}")
        beside = {  # option -> (its degree, what it does, why more)
            "sp": ("tp", "cuts the sequence over the TP group", " (Megatron turns sequence parallelism off at tensor "
                   "parallel size 1)"),
            "async_tp": ("tp", "overlaps TP's collectives", ""), "tp_layout": ("tp", "says what a TP rank keeps", ""),
            "cp_style": ("cp", "says how the keys and values travel the CP group", ""),
            "cp_split": ("cp", "says how a sequence is cut over the CP group", ""),
            "pp_schedule": ("pp", "says in which order the pipeline runs its micro-batches", ""),
            "virtual_stages": ("pp", "says how many stages each pipeline rank holds", ""),
            "pp_split": ("pp", "says where the layers are cut into stages", "")}
        defaults = ParallelSpec()
        given = {f for f in beside if getattr(self, f) != getattr(defaults, f)} if given is None else set(given)
        for field, (degree, what, why) in beside.items():
            if field in given and getattr(self, degree) == 1:
                letter = LETTERS[degree] if name(degree).startswith("--") else ""
                raise ValueError(f"{name(field)} {what}: give {name(degree)} {letter + ' ' if letter else ''}> 1 with "
                                 f"it{why}")
        if self.cp > 1:
            from zerosim.parallel.context import SPLITS, STYLES

            for field, allowed in (("cp_style", STYLES), ("cp_split", tuple(SPLITS))):
                if getattr(self, field) not in allowed:
                    raise ValueError(f"{name(field)} must be one of {', '.join(allowed)}, got {getattr(self, field)!r}")
        if self.pp > 1:
            self._check_pipeline(name)
        beside = self.tp * self.cp * self.pp
        if world_size is not None and world_size % beside:
            product = "" if len(self.degrees) == 1 else f" = {beside} GPUs"
            quotient = " · ".join(d for d in DEGREES if getattr(self, d) > 1)
            raise ValueError(f"{self._degrees_text(name)}{product} does not divide {name('world_size')} {world_size}: "
                             f"{name('world_size')} counts every GPU and the data-parallel degree is ranks / "
                             f"{quotient if ' ' not in quotient else '(' + quotient + ')'}")
        return self

    def _check_pipeline(self, name) -> None:
        """Pipeline parallelism's options (`name`: how the caller spells each field), and what beside it zerosim
        does not model (parallel/pipeline/_engine.py says why)."""
        from zerosim.parallel.pipeline import RULES, SCHEDULES

        if self.pp_schedule not in SCHEDULES:
            raise ValueError(f"{name('pp_schedule')} must be one of {', '.join(SCHEDULES)}, got {self.pp_schedule!r}")
        if self.pp_split not in RULES:
            raise ValueError(f"{name('pp_split')} must be one of {', '.join(RULES)}, got {self.pp_split!r}")
        v = self.virtual_stages
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
            raise ValueError(f"{name('virtual_stages')} must be a positive integer, got {v!r}")
        if v is not None and v != 1 and SCHEDULES[self.pp_schedule].default_virtual == 1:
            raise ValueError(f"{name('pp_schedule')} {self.pp_schedule} runs one stage a rank (torch's "
                             f"PipelineScheduleSingle; torchtitan: 'Single stage schedule requires exactly 1 stage per "
                             f"rank'), not {name('virtual_stages')} {v}: use interleaved-1f1b or zero-bubble")

    def pipeline_check(self, micro_batches: int, stage=None, precision=None, recipe=None, comm=None,
                       names: dict = API) -> None:
        """With pp > 1: the schedule's table for `micro_batches` M a data-parallel rank (torch refuses 1F1B with fewer
        micro-batches than stages, the interleaved schedules' rounds: parallel/pipeline make_table) and what is
        refused beside a pipeline at ZeRO `stage` with `precision`, `recipe` (None: the policy's) and `comm`
        (DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3; a loss scaler that skips steps: parallel/pipeline
        check_beside), in the caller's words."""
        if self.pp == 1:
            return
        from zerosim.parallel.pipeline import check_beside, get_schedule, make_table

        def name(field):
            return names.get(field, field)

        try:
            make_table(self.pp_schedule, self.pp, micro_batches, self.virtual_stages)
        except ValueError as e:
            why = str(e).removeprefix(f"{self.pp_schedule}: ")  # the schedule is named already
            raise ValueError(f"{name('micro_batches')} {micro_batches} beside {name('pp')} {self.pp} "
                             f"{name('pp_schedule')} {self.pp_schedule}: {why}") from None
        if stage is not None:
            virtual = self.virtual_stages or get_schedule(self.pp_schedule).default_virtual
            check_beside(stage, "fp32" if precision is None else precision, recipe, comm, virtual,
                         f"{name('stage')} {stage} beside {name('pp')} {self.pp}")

    @classmethod
    def of(cls, spec, tp: int = 1, sp: bool = False, layout: str | None = None, async_tp: bool = False):
        """`spec`, or the ParallelSpec the older arguments of the library's functions (tp, sp, layout, async_tp)
        describe."""
        if spec is not None:
            return spec
        return cls(tp=tp, sp=sp, tp_layout=layout if tp > 1 or sp else None, async_tp=async_tp)

    def check_mesh(self, mesh) -> None:
        """A DataMesh given beside this spec must hold its degrees."""
        if (mesh.dims.tp, mesh.dims.cp, mesh.dims.pp) != (self.tp, self.cp, self.pp):
            raise ValueError(f"the mesh's degrees (tp {mesh.dims.tp}, cp {mesh.dims.cp}, pp {mesh.dims.pp}) and the "
                             f"ParallelSpec's (tp {self.tp}, cp {self.cp}, pp {self.pp}) differ: build the mesh from "
                             "the spec")

    def _degrees_text(self, name) -> str:
        return " × ".join(f"{name(d)} {getattr(self, d)}" for d in DEGREES if getattr(self, d) > 1) or "1"

    def dims(self, world_size: int) -> ParallelDims:
        """The job's degrees on `world_size` GPUs (the data-parallel ones what the world leaves)."""
        return ParallelDims(world_size, **{d: getattr(self, d) for d in DEGREES})

    @property
    def degrees(self) -> dict:
        """{degree: value} of the degrees above 1, in ParallelDims' names."""
        return {d: getattr(self, d) for d in DEGREES if getattr(self, d) > 1}

    def model_check(self, seq_len: int | None, attention: str | None = None, checkpoint: str | None = None,
                    meta: bool = True, names: dict = API, kernels: str | None = None) -> None:
        """What the model must allow: beside CP, flash attention without op-level checkpointing and a sequence
        length that splits (parallel/context's own checks); on the meta backend (`meta`), torch eager's extra tensors
        are not modelled beside CP (`kernels` "eager": the CP twin keeps what zerosim's units keep, as fused kernels
        do)."""
        if self.tp > 1:
            from zerosim.parallel.tensor import check_checkpoint

            check_checkpoint(checkpoint)
        if self.cp == 1:
            return
        from zerosim.parallel.context import check_length, check_options

        check_options(attention, checkpoint)
        if meta and kernels == "eager":
            raise ValueError(f"{names.get('kernels', 'kernels')} eager keeps torch eager's extra tensors, which beside "
                             f"{names.get('cp', 'cp')} are not modelled: a CP rank's twin keeps what zerosim's units "
                             "keep, as fused kernels do (Transformer Engine's attention, torch.compile): use fused")
        if seq_len is not None:
            check_length(seq_len, self.cp_split, self.cp, self.tp if self.sp else 1)

    def micro(self, batch: int, seq_len: int) -> tuple:
        """(B, L / C): each rank's share of a micro-batch of B sequences of L tokens."""
        return batch, seq_len // self.cp

    def build(self, model) -> tuple:
        """(the model the engine runs, the parallelisms beside data parallelism) for `model` (a GPT or Llama, or its
        data-less twin): the model itself and none when nothing is asked for."""
        if self.tp == 1 and not self.sp and self.cp == 1:
            return model, ()
        tensor = None
        if self.tp > 1 or self.sp:
            from zerosim.parallel.tensor import TensorParallel, padded_model

            layout = {} if self.tp_layout is None else {"layout": self.tp_layout}
            model = padded_model(model, self.tp)  # the model itself where its vocabulary splits over T
            tensor = TensorParallel(model, self.tp, self.sp, async_tp=self.async_tp, **layout)
        if self.cp == 1:
            return tensor.model, (tensor,)
        from zerosim.parallel.context import ContextParallel

        context = ContextParallel(model, self.cp, self.cp_style, self.cp_split, tensor=tensor)
        return context.model, context.parallelisms

    def flags(self) -> str:
        """The command-line flags that ask for this spec (what a printed command carries): those not at their
        default."""
        out, defaults = [], ParallelSpec()
        for f in fields(self):
            value = getattr(self, f.name)
            if value == getattr(defaults, f.name):
                continue
            out.append(FLAGS[f.name] if isinstance(value, bool) else f"{FLAGS[f.name]} {value}")
        return " ".join(out)

    def describe(self) -> str:
        """In words, for a report's header: "" for data parallelism alone."""
        parts = []
        if self.tp > 1:
            parts.append(f"TP {self.tp}" + (" + SP" if self.sp else ""))
        if self.cp > 1:
            parts.append(f"CP {self.cp} ({self.cp_style}, {self.cp_split})")
        if self.pp > 1:
            v = self.virtual_stages
            parts.append(f"PP {self.pp} ({self.pp_schedule}" + ("" if v is None else f", {v} virtual stages")
                         + ("" if self.pp_split == "torchtitan" else f", {self.pp_split}'s split") + ")")
        return " × ".join(parts)

