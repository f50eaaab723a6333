"""The parallelisms beside data parallelism that one job asks for, by name, in one record: `ParallelSpec`.

What the commands' parallel flags say (cli/parallel_args.py), what the meta engines, the timeline and the planner build
a job's model from, and what a printed command that reproduces a planned row carries. Its degrees are `ParallelDims`'
(_dims.py: they multiply, with the data-parallel ones, to the world size); its options belong to the parallelism they
name:

    tp, sp, tp_layout, async_tp     tensor parallelism (parallel/tensor): Megatron's column and row layers over T
                                    consecutive GPUs, sequence parallelism, what a TP rank keeps, async TP's bound
    cp, cp_style, cp_split          context parallelism (parallel/context): each rank 1/C of every sequence, the K/V
                                    round a ring or all-gathered, sequences cut contiguously or in the zigzag

`spec.check(world_size)` checks every choice once, in the words of whoever made it (`names`: the API's field names,
or the command line's flags); `spec.model_check(...)` what the model's shape and strategy must allow;
`spec.build(model)` the model the engine runs and the parallelisms beside it; `spec.micro(B, L)` a rank's share of a
micro-batch. Pipeline parallelism joins as one more degree and its options.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from zerosim.parallel._dims import ParallelDims

API = {}  # how the library names each field: by itself
FLAGS = {"tp": "--tp", "sp": "--sp", "tp_layout": "--tp-layout", "async_tp": "--async-tp", "cp": "--cp",
         "cp_style": "--cp-style", "cp_split": "--cp-split", "world_size": "--ranks",
         "kernels": "--kernels"}  # how the command line names them
DEGREES = ("tp", "cp")  # the fields that are ParallelDims' degrees, in its names


@dataclass(frozen=True)
class ParallelSpec:
    """The parallelisms beside data parallelism of one job (see the module docstring). Every default is "not asked
    for": `ParallelSpec()` is data parallelism alone, every bit and call as without it."""

    tp: int = 1  # T: tensor parallelism's degree, innermost on the mesh
    sp: bool = False  # with tp > 1: Megatron's sequence parallelism
    tp_layout: str | None = None  # with tp > 1: what a TP rank keeps (parallel/tensor LAYOUTS); None: the default
    async_tp: bool = False  # with tp > 1: TP's collectives overlapping the GEMMs they feed (a bound, timeline only)
    cp: int = 1  # C: context parallelism's degree, each rank 1/C of every sequence
    cp_style: str = "ring"  # with cp > 1: "ring" (Transformer Engine's p2p) or "allgather" (Llama 3's)
    cp_split: str = "zigzag"  # with cp > 1: "zigzag" (load-balanced) or "contiguous"

    def check(self, world_size: int | None = None, names: dict = API, given=None) -> "ParallelSpec":
        """Every choice checked, naming it as `names` spells it (FLAGS on the command line): degrees positive
        integers whose product divides the world, each option only beside its degree (`given`: the options the
        caller set, default those not at their default), the combinations zerosim does not model refused. Returns
        itself."""
        def name(field):
            return names.get(field, field)

        for field in DEGREES:
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name(field)} must be a positive integer, got {value!r}")
        beside = {  # option -> (its degree, what it does, why more)
            "sp": ("tp", "cuts the sequence over the TP group", " (Megatron turns sequence parallelism off at tensor "
                   "parallel size 1)"),
            "async_tp": ("tp", "overlaps TP's collectives", ""), "tp_layout": ("tp", "says what a TP rank keeps", ""),
            "cp_style": ("cp", "says how the keys and values travel the CP group", ""),
            "cp_split": ("cp", "says how a sequence is cut over the CP group", "")}
        defaults = ParallelSpec()
        given = {f for f in beside if getattr(self, f) != getattr(defaults, f)} if given is None else set(given)
        for field, (degree, what, why) in beside.items():
            if field in given and getattr(self, degree) == 1:
                letter = {"tp": "T", "cp": "C"}[degree] if name(degree).startswith("--") else ""
                raise ValueError(f"{name(field)} {what}: give {name(degree)} {letter + ' ' if letter else ''}> 1 with "
                                 f"it{why}")
        if self.cp > 1:
            from zerosim.parallel.context import SPLITS, STYLES

            for field, allowed in (("cp_style", STYLES), ("cp_split", tuple(SPLITS))):
                if getattr(self, field) not in allowed:
                    raise ValueError(f"{name(field)} must be one of {', '.join(allowed)}, got {getattr(self, field)!r}")
            if self.sp:
                raise ValueError(f"{name('cp')} beside sequence parallelism ({name('sp')}) is not modelled: context "
                                 "parallelism runs beside TP's attention without it (drop one)")
        if world_size is not None and world_size % (self.tp * self.cp):
            product = "" if (self.tp == 1) != (self.cp == 1) else f" = {self.tp * self.cp} GPUs"
            quotient = " · ".join(d for d in DEGREES if getattr(self, d) > 1)
            raise ValueError(f"{self._degrees_text(name)}{product} does not divide {name('world_size')} {world_size}: "
                             f"{name('world_size')} counts every GPU and the data-parallel degree is ranks / "
                             f"{quotient if ' ' not in quotient else '(' + quotient + ')'}")
        return self

    @classmethod
    def of(cls, spec, tp: int = 1, sp: bool = False, layout: str | None = None, async_tp: bool = False):
        """`spec`, or the ParallelSpec the older arguments of the library's functions (tp, sp, layout, async_tp)
        describe."""
        if spec is not None:
            return spec
        return cls(tp=tp, sp=sp, tp_layout=layout if tp > 1 or sp else None, async_tp=async_tp)

    def check_mesh(self, mesh) -> None:
        """A DataMesh given beside this spec must hold its degrees."""
        if (mesh.dims.tp, mesh.dims.cp) != (self.tp, self.cp):
            raise ValueError(f"the mesh's degrees (tp {mesh.dims.tp}, cp {mesh.dims.cp}) and the ParallelSpec's (tp "
                             f"{self.tp}, cp {self.cp}) differ: build the mesh from the spec")

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
        length that splits (parallel/context's own checks); on the meta backend (`meta`), CP beside TP is not
        modelled yet (its twin), nor torch eager's extra tensors (`kernels` "eager": the CP twin keeps what zerosim's
        units keep, as fused kernels do)."""
        if self.tp > 1:
            from zerosim.parallel.tensor import check_checkpoint

            check_checkpoint(checkpoint)
        if self.cp == 1:
            return
        from zerosim.parallel.context import check_length, check_options

        if meta and self.tp > 1:
            raise ValueError(f"{names.get('cp', 'cp')} beside {names.get('tp', 'tp')}: the data-less twin of context "
                             "parallelism beside tensor parallelism is not modelled yet (zerosim train runs the two "
                             "together on real numbers)")
        check_options(attention, checkpoint)
        if meta and kernels == "eager":
            raise ValueError(f"{names.get('kernels', 'kernels')} eager keeps torch eager's extra tensors, which beside "
                             f"{names.get('cp', 'cp')} are not modelled: a CP rank's twin keeps what zerosim's units "
                             "keep, as fused kernels do (Transformer Engine's attention, torch.compile): use fused")
        if seq_len is not None:
            check_length(seq_len, self.cp_split, self.cp)

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
            tensor = TensorParallel(padded_model(model, self.tp), self.tp, self.sp, async_tp=self.async_tp, **layout)
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
        return " × ".join(parts)

