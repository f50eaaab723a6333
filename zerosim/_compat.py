"""Old import paths, kept working until REMOVAL: zerosim's modules moved into folders by concept (issue 34), and
each old dotted path answers with a stand-in module that forwards to the new one with a DeprecationWarning.

    import zerosim.zero.engine                 # works, warns: use zerosim.parallel.data (ZeroEngine)
    from zerosim.timeline import simulate      # works, warns: use zerosim.analysis.timeline

They go after REMOVAL (release REMOVED_IN, or the date, whichever comes first; docs/contributing.md says so):
tests/test_layout.py fails from that day on, so whoever works then deletes this file, its `install()` in
zerosim/__init__.py and the tests of the old paths.

A stand-in costs nothing until it is used: `install()` puts one finder at the head of `sys.meta_path`, which answers
only for MOVED's names and makes a stand-in when one is imported (importlib then sets it on its parent, so
`zerosim.zero.ZeroEngine` works after `import zerosim.zero`). Every other import asks it one dictionary lookup and
goes on. SHADOWED are the old modules whose name a face now gives one of its own functions (`zerosim.models.schedule`
is a function): an import through a finder would set the stand-in over the function, so their stand-ins are put in
`sys.modules` as their face starts loading, where `import` finds them without setting anything.
MOVED is the whole move, old path -> new path: docs/explanation/architecture.md draws the new tree.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
import warnings

REMOVED_IN = "0.2.0"  # the release without the old paths (zerosim.__version__ is 0.1.0)
REMOVAL = "2027-02-25"  # ... or this day, three months after the date was set, if no release came first (ISO 8601:
# a string, so that `import zerosim` loads no datetime; tests/test_layout.py reads it as a date)

MOVED = {
    "zerosim.precision.formats": "zerosim.precision._formats",
    "zerosim.precision.ulp": "zerosim.precision._ulp",
    "zerosim.precision.policy": "zerosim.precision._policy",
    "zerosim.precision.loss_scaling": "zerosim.precision._loss_scaling",
    "zerosim.precision.cast_inputs": "zerosim.precision.cast._inputs",
    "zerosim.precision.cast_reference": "zerosim.precision.cast._reference",
    "zerosim.precision.cast_namespace": "zerosim.precision.cast._namespace",
    "zerosim.precision.stochastic": "zerosim.precision.cast._stochastic",
    "zerosim.precision.counter_random": "zerosim.precision.cast._counter_random",
    "zerosim.precision.subnormals": "zerosim.precision.cast._subnormals",
    "zerosim.precision.bf16_bits": "zerosim.precision.cast._bf16_bits",
    "zerosim.precision.namespace": "zerosim.precision.cast._arrays",
    "zerosim.precision.standin_array": "zerosim.precision.cast._standin",
    "zerosim.precision.fp8_scaling": "zerosim.precision.quantize._fp8_scaling",
    "zerosim.precision.fp8_recipes": "zerosim.precision.quantize._fp8_recipes",
    "zerosim.precision.fp8_blocks": "zerosim.precision.quantize._fp8_blocks",
    "zerosim.precision.int_quant": "zerosim.precision.quantize._int_quant",
    "zerosim.cluster.cluster": "zerosim.cluster._cluster",
    "zerosim.cluster.rank": "zerosim.cluster._rank",
    "zerosim.cluster.mesh": "zerosim.cluster._mesh",
    "zerosim.cluster.ledger": "zerosim.cluster._ledger",
    "zerosim.cluster.trace": "zerosim.cluster._trace",
    "zerosim.cluster.events": "zerosim.cluster._events",
    "zerosim.cluster.pool": "zerosim.cluster._pool",
    "zerosim.cluster.report": "zerosim.cluster._report",
    "zerosim.cluster.budget": "zerosim.cluster._budget",
    "zerosim.backends.base": "zerosim.backends._base",
    "zerosim.backends.numpy_sim": "zerosim.backends._numpy",
    "zerosim.backends.meta": "zerosim.backends._meta",
    "zerosim.backends.mpi_failure": "zerosim.backends.mpi._failure",
    "zerosim.backends.launch": "zerosim.backends.mpi._launch",
    "zerosim.backends.cupy_nccl": "zerosim.backends.cupy._backend",
    "zerosim.backends.cupy_probe": "zerosim.backends.cupy._probe",
    "zerosim.backends.cupy_sim": "zerosim.backends.cupy._sim",
    "zerosim.backends.nccl_collectives": "zerosim.backends.cupy._nccl_collectives",
    "zerosim.backends.nccl_types": "zerosim.backends.cupy._nccl_types",
    "zerosim.collectives.calls": "zerosim.collectives._calls",
    "zerosim.collectives.ring": "zerosim.collectives._ring",
    "zerosim.collectives.fast": "zerosim.collectives._fast",
    "zerosim.collectives.staging": "zerosim.collectives._staging",
    "zerosim.collectives.checks": "zerosim.collectives._checks",
    "zerosim.collectives.naive": "zerosim.collectives._naive",
    "zerosim.collectives.ops": "zerosim.collectives._ops",
    "zerosim.collectives.shards": "zerosim.collectives._shards",
    "zerosim.collectives.broadcast": "zerosim.collectives._broadcast",
    "zerosim.collectives.all_to_all": "zerosim.collectives._all_to_all",
    "zerosim.collectives.wire": "zerosim.collectives._wire",
    "zerosim.collectives.nccl_allreduce": "zerosim.collectives.chunk_maps._nccl",
    "zerosim.collectives.gloo": "zerosim.collectives.chunk_maps._gloo",
    "zerosim.collectives.qgz": "zerosim.collectives.quantized._qgz",
    "zerosim.collectives.nccl_check": "zerosim.frameworks.nccl._check",
    "zerosim.optim.base": "zerosim.optim._base",
    "zerosim.optim.adam": "zerosim.optim._adam",
    "zerosim.optim.adan": "zerosim.optim._adan",
    "zerosim.optim.lion": "zerosim.optim._lion",
    "zerosim.optim.sgd": "zerosim.optim._sgd",
    "zerosim.optim.muon": "zerosim.optim._muon",
    "zerosim.optim.by_matrix": "zerosim.optim._by_matrix",
    "zerosim.optim.stored_state": "zerosim.optim._stored_state",
    "zerosim.models.model": "zerosim.models._model",
    "zerosim.models.run": "zerosim.models._run",
    "zerosim.models.schedule": "zerosim.models._schedule",
    "zerosim.models.spaces": "zerosim.models._spaces",
    "zerosim.models.losses": "zerosim.models.layers._losses",
    "zerosim.models.lm_loss": "zerosim.models.layers._lm_loss",
    "zerosim.models.layernorm": "zerosim.models.layers._layernorm",
    "zerosim.models.rmsnorm": "zerosim.models.layers._rmsnorm",
    "zerosim.models.rotary": "zerosim.models.layers._rotary",
    "zerosim.models.attention": "zerosim.models.layers._attention",
    "zerosim.models.flash_attention": "zerosim.models.layers._flash_attention",
    "zerosim.models.token_linear": "zerosim.models.layers._token_linear",
    "zerosim.models.prenorm": "zerosim.models.layers._prenorm",
    "zerosim.models.tinynet": "zerosim.models.mlp._tinynet",
    "zerosim.models.sequence_data": "zerosim.models.data._sequences",
    "zerosim.models.transformer": "zerosim.models.gpt._block",
    "zerosim.models.attention_block": "zerosim.models.gpt._attention",
    "zerosim.models.ffn": "zerosim.models.gpt._mlp",
    "zerosim.models.lm_head": "zerosim.models.gpt._head",
    "zerosim.models.embedding": "zerosim.models.gpt._embedding",
    "zerosim.models.meta_gpt": "zerosim.models.gpt._meta",
    "zerosim.models.llama_block": "zerosim.models.llama._block",
    "zerosim.models.gqa_attention": "zerosim.models.llama._attention",
    "zerosim.models.swiglu": "zerosim.models.llama._mlp",
    "zerosim.models.llama_ends": "zerosim.models.llama",
    "zerosim.models.meta_llama": "zerosim.models.llama._meta",
    "zerosim.models.hf_config": "zerosim.models.hf._config",
    "zerosim.zero": "zerosim.parallel.data",
    "zerosim.zero.engine": "zerosim.parallel.data._engine",
    "zerosim.zero.plan": "zerosim.parallel.data._plan",
    "zerosim.zero.context": "zerosim.parallel.data._context",
    "zerosim.zero.compute": "zerosim.parallel.data._compute",
    "zerosim.zero.fetch": "zerosim.parallel.data._fetch",
    "zerosim.zero.gather": "zerosim.parallel.data._gather",
    "zerosim.zero.reduce": "zerosim.parallel.data._reduce",
    "zerosim.zero.buckets": "zerosim.parallel.data._buckets",
    "zerosim.zero.step_checks": "zerosim.parallel.data._step_checks",
    "zerosim.zero.update": "zerosim.parallel.data._update",
    "zerosim.zero.state": "zerosim.parallel.data._state",
    "zerosim.zero.batches": "zerosim.parallel.data._batches",
    "zerosim.zero.hooks": "zerosim.parallel.data._hooks",
    "zerosim.zero.clipping": "zerosim.parallel.data._clipping",
    "zerosim.zero.comm_schedule": "zerosim.parallel.data._comm_schedule",
    "zerosim.zero.recipes": "zerosim.parallel.data.recipes._recipes",
    "zerosim.zero.averaging": "zerosim.parallel.data.recipes._averaging",
    "zerosim.zero.divide_factors": "zerosim.parallel.data.recipes._divide_factors",
    "zerosim.zero.param_buckets": "zerosim.parallel.data.recipes._param_buckets",
    "zerosim.zero.ddp_reduce": "zerosim.parallel.data.recipes._ddp_reduce",
    "zerosim.zero.bucket_allreduce": "zerosim.parallel.data.recipes._bucket_allreduce",
    "zerosim.zero.mesh_groups": "zerosim.parallel.data.multinode._groups",
    "zerosim.zero.replicate": "zerosim.parallel.data.multinode._replicate",
    "zerosim.zero.group_layout": "zerosim.parallel.data.multinode._group_layout",
    "zerosim.zero.zeropp": "zerosim.parallel.data.zeropp._wire",
    "zerosim.zero.qgz_reduce": "zerosim.parallel.data.zeropp._qgz_reduce",
    "zerosim.zero.layouts": "zerosim.parallel.data.layouts._choose",
    "zerosim.zero.flat": "zerosim.parallel.data.layouts._flat",
    "zerosim.zero.partition": "zerosim.parallel.data.layouts._partition",
    "zerosim.reference.oracle": "zerosim.reference._oracle",
    "zerosim.reference.mesh_reduce": "zerosim.reference._mesh_reduce",
    "zerosim.reference.wire_oracle": "zerosim.reference._wire",
    "zerosim.reference.qgz_reference": "zerosim.reference._qgz",
    "zerosim.reference.replay": "zerosim.replay._run",
    "zerosim.reference.replay_text": "zerosim.replay._text",
    "zerosim.reference.replay_legend": "zerosim.replay._legend",
    "zerosim.reference.replay_scaling": "zerosim.replay._scaling",
    "zerosim.reference.mesh_replay": "zerosim.replay._mesh",
    "zerosim.reference.recipe_error": "zerosim.analysis.numerics._recipe_error",
    "zerosim.reference.mesh_error": "zerosim.analysis.numerics._mesh_error",
    "zerosim.reference.underflow": "zerosim.analysis.numerics._underflow",
    "zerosim.reference.state_formats": "zerosim.analysis.numerics._state_formats",
    "zerosim.costs": "zerosim.analysis.costs",
    "zerosim.costs.memory": "zerosim.analysis.costs._memory",
    "zerosim.costs.activations": "zerosim.analysis.costs._activations",
    "zerosim.costs.comm": "zerosim.analysis.costs._comm",
    "zerosim.costs.conventions": "zerosim.analysis.costs._conventions",
    "zerosim.costs.gpus": "zerosim.analysis.costs._gpus",
    "zerosim.costs.measured": "zerosim.analysis.costs._measured",
    "zerosim.costs.overheads": "zerosim.analysis.costs._overheads",
    "zerosim.costs.presets": "zerosim.analysis.costs._presets",
    "zerosim.timeline": "zerosim.analysis.timeline",
    "zerosim.timeline.simulate": "zerosim.analysis.timeline._simulate",
    "zerosim.timeline.result": "zerosim.analysis.timeline._result",
    "zerosim.timeline.cost": "zerosim.analysis.timeline._cost",
    "zerosim.timeline.devices": "zerosim.analysis.timeline._devices",
    "zerosim.timeline.chrome_trace": "zerosim.analysis.timeline._chrome_trace",
    "zerosim.timeline.plan": "zerosim.analysis.planner._plan",
    "zerosim.timeline.sweep": "zerosim.analysis.planner._sweep",
    "zerosim.timeline.strategy_sweep": "zerosim.analysis.planner._strategy_sweep",
    "zerosim.configs": "zerosim.frameworks.deepspeed",
    "zerosim.configs.deepspeed": "zerosim.frameworks.deepspeed._config",
    "zerosim.configs.ds_keys": "zerosim.frameworks.deepspeed._keys",
    "zerosim.parity": "zerosim.frameworks.torch",
    "zerosim.parity.launch": "zerosim.frameworks.torch._launch",
    "zerosim.parity.common": "zerosim.frameworks.torch._common",
    "zerosim.parity.ddp": "zerosim.frameworks.torch._ddp",
    "zerosim.parity.zero1": "zerosim.frameworks.torch._zero1",
    "zerosim.parity.fsdp": "zerosim.frameworks.torch._fsdp",
    "zerosim.parity.kits": "zerosim.frameworks.torch._kits",
    "zerosim.parity.own_grads": "zerosim.frameworks.torch._own_grads",
    "zerosim.parity.torch_collectives": "zerosim.frameworks.torch._collectives",
    "zerosim.parity.torch_sqrt": "zerosim.frameworks.torch._sqrt",
    "zerosim.checkpoint.files": "zerosim.checkpoint._files",
    "zerosim.checkpoint.folders": "zerosim.checkpoint._folders",
    "zerosim.checkpoint.manifest": "zerosim.checkpoint._manifest",
    "zerosim.checkpoint.manifest_checks": "zerosim.checkpoint._manifest_checks",
    "zerosim.checkpoint.save": "zerosim.checkpoint._save",
    "zerosim.checkpoint.load": "zerosim.checkpoint._load",
    "zerosim.checkpoint.consolidate": "zerosim.checkpoint._consolidate",
    "zerosim.checkpoint.resume": "zerosim.checkpoint._resume",
    "zerosim.checkpoint.replicas": "zerosim.checkpoint._replicas",
    "zerosim.train.trainer": "zerosim.train._trainer",
    "zerosim.viz.activations_figure": "zerosim.viz._activations",
    "zerosim.viz.dataflow_figure": "zerosim.viz._dataflow",
    "zerosim.viz.fit_figure": "zerosim.viz._fit",
    "zerosim.viz.ledger_figure": "zerosim.viz._ledger",
    "zerosim.viz.loss_scale_figure": "zerosim.viz._loss_scale",
    "zerosim.viz.many_nodes_figure": "zerosim.viz._many_nodes",
    "zerosim.viz.memory_figure": "zerosim.viz._memory",
    "zerosim.viz.mesh_ownership_figure": "zerosim.viz._mesh_ownership",
    "zerosim.viz.ownership_figure": "zerosim.viz._ownership",
    "zerosim.viz.peak_figure": "zerosim.viz._peak",
    "zerosim.viz.plan_figure": "zerosim.viz._plan",
    "zerosim.viz.recipe_figure": "zerosim.viz._recipe",
    "zerosim.viz.ring_figure": "zerosim.viz._ring",
    "zerosim.viz.spacing_figure": "zerosim.viz._spacing",
    "zerosim.viz.sweep_figure": "zerosim.viz._sweep",
    "zerosim.viz.tier_timeline_figure": "zerosim.viz._tier_timeline",
    "zerosim.viz.timeline_figure": "zerosim.viz._timeline",
    "zerosim.viz.underflow_figure": "zerosim.viz._underflow",
    "zerosim.viz.wire_figure": "zerosim.viz._wire",
    "zerosim.viz.zero3_figure": "zerosim.viz._zero3",
    "zerosim.viz.palette": "zerosim.viz._palette",
    "zerosim.viz.slides": "zerosim.viz._slides",
    "zerosim.explore.explorer_canvas": "zerosim.explore._canvas",
    "zerosim.explore.front_end": "zerosim.explore._front_end",
    "zerosim.explore.memory_explorer": "zerosim.explore._memory",
    "zerosim.explore.numbers": "zerosim.explore._numbers",
    "zerosim.explore.page": "zerosim.explore._page",
    "zerosim.explore.ring_explorer": "zerosim.explore._ring",
    "zerosim.explore.settings": "zerosim.explore._settings",
    "zerosim.exercises": "zerosim.teaching.exercises",
    "zerosim.exercises.average_dtype": "zerosim.teaching.exercises._average_dtype",
    "zerosim.exercises.engine_cases": "zerosim.teaching.exercises._engine_cases",
    "zerosim.exercises.finish_cases": "zerosim.teaching.exercises._finish_cases",
    "zerosim.exercises.grading": "zerosim.teaching.exercises._grading",
    "zerosim.exercises.refresh_params": "zerosim.teaching.exercises._refresh_params",
    "zerosim.exercises.ring_chunk": "zerosim.teaching.exercises._ring_chunk",
    "zerosim.exercises.sandbox": "zerosim.teaching.exercises._sandbox",
    "zerosim.exercises.shard_offset": "zerosim.teaching.exercises._shard_offset",
    "zerosim.exercises.stage2_free": "zerosim.teaching.exercises._stage2_free",
    "zerosim.exercises.unscale_once": "zerosim.teaching.exercises._unscale_once",
    "zerosim.assignments": "zerosim.teaching.assignments",
    "zerosim.assignments.a1_ring": "zerosim.teaching.assignments._a1_ring",
    "zerosim.assignments.a2_zero12": "zerosim.teaching.assignments._a2_zero12",
    "zerosim.assignments.a3_exposed": "zerosim.teaching.assignments._a3_exposed",
    "zerosim.assignments.a3_zero3": "zerosim.teaching.assignments._a3_zero3",
    "zerosim.assignments.assignment": "zerosim.teaching.assignments._assignment",
    "zerosim.assignments.autograde": "zerosim.teaching.assignments._autograde",
}

# old module -> its face, which defines a function of the same name (tests/test_layout.py checks the list)
SHADOWED = {
    "zerosim.precision.ulp": "zerosim.precision",
    "zerosim.collectives.broadcast": "zerosim.collectives",
    "zerosim.collectives.all_to_all": "zerosim.collectives",
    "zerosim.models.schedule": "zerosim.models",
    "zerosim.checkpoint.save": "zerosim.checkpoint",
    "zerosim.checkpoint.load": "zerosim.checkpoint",
    "zerosim.checkpoint.consolidate": "zerosim.checkpoint",
    **{f"zerosim.viz.{name}": "zerosim.viz" for name in (
        "dataflow_figure", "fit_figure", "ledger_figure", "loss_scale_figure", "many_nodes_figure",
        "mesh_ownership_figure", "ownership_figure", "plan_figure", "recipe_figure", "ring_figure", "spacing_figure",
        "sweep_figure", "tier_timeline_figure", "timeline_figure", "underflow_figure", "zero3_figure")},
}
_SHADOWED_UNDER = {}  # face -> its SHADOWED old modules
for _old, _face in SHADOWED.items():
    _SHADOWED_UNDER.setdefault(_face, []).append(_old)


class _Moved(types.ModuleType):
    """A module that moved: attributes come from its new home, with a warning the first time."""

    def __init__(self, old: str, new: str):
        super().__init__(old, f"moved to {new}")
        self.__dict__["_zerosim_new"] = new
        self.__dict__["__path__"] = []  # a package, so that `import old.child` may name a child stand-in

    def __getattr__(self, name: str):
        new = self.__dict__["_zerosim_new"]
        if name.startswith("__") and name != "__all__":  # inspect and pytest probe every module's __file__
            raise AttributeError(name)
        if not self.__dict__.get("_zerosim_warned"):
            self.__dict__["_zerosim_warned"] = True
            face = new.split("._")[0]  # the package whose __init__ exports the names
            warnings.warn(f"{self.__name__} moved into {face} (import from there); the old path goes in release "
                          f"{REMOVED_IN} or on {REMOVAL}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)

    def __dir__(self):
        return dir(importlib.import_module(self.__dict__["_zerosim_new"]))

    def __setattr__(self, name: str, value) -> None:
        """importlib sets a child it imported on its parent: not a stand-in on a stand-in, whose names forward to the
        new face (`from zerosim.timeline import simulate` is the function, not the old module's stand-in)."""
        if not isinstance(value, _Moved):
            super().__setattr__(name, value)


class _Finder:
    """The one `sys.meta_path` entry of the old paths (module docstring): a MOVED name gets a stand-in; a face about
    to load first gets its SHADOWED stand-ins placed; every other name is left to the finders after it."""

    def find_spec(self, name: str, path=None, target=None):
        for old in _SHADOWED_UNDER.get(name, ()):
            if old not in sys.modules:
                sys.modules[old] = _Moved(old, MOVED[old])
        if name not in MOVED or name in SHADOWED:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return _Moved(spec.name, MOVED[spec.name])

    def exec_module(self, module) -> None:
        """Nothing to run: a stand-in reads its new home when first asked for a name."""


_FINDER = _Finder()


def install() -> None:
    """Put the old paths' finder first on `sys.meta_path` (once), and the SHADOWED stand-ins of faces loaded already."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    for face in [f for f in _SHADOWED_UNDER if f in sys.modules]:
        _FINDER.find_spec(face)
