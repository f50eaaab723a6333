"""What `import zerosim` and `zerosim --help` load: the import graph kept small, so a command starts at once.

Time on this shared machine varies with its load, so the test counts modules, never seconds (the time is measured
in benchmarks/imports.py). Each runs in a fresh interpreter: this one has imported much of zerosim already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from zerosim.cli.main import COMMANDS

# What a fresh `import zerosim` may load of zerosim: the package, its old-path shim and its lazy faces' helper, nothing
# else (each name of the face, each subpackage, is imported when first used: zerosim/__init__.py, zerosim/_lazy.py).
# A stand-in for an old path (_compat.py) is made only when that path is used, and is not counted.
LOADED = """
import json, sys
before = set(sys.modules)
{code}
new = sorted(m for m in set(sys.modules) - before if type(sys.modules[m]).__name__ != "_Moved")
print(json.dumps(new))
"""


def loaded_by(code: str) -> list:
    out = subprocess.run([sys.executable, "-c", LOADED.format(code=code)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_import_zerosim_loads_no_subpackage_and_no_numpy():
    loaded = loaded_by("import zerosim")
    assert [m for m in loaded if m.startswith("zerosim")] == ["zerosim", "zerosim._compat", "zerosim._lazy"]
    assert "numpy" not in loaded and "ml_dtypes" not in loaded
    assert "datetime" not in loaded  # _compat.REMOVAL is an ISO string, read as a date by tests/test_layout.py only
    assert len(loaded) <= 10, loaded  # the standard library's few (importlib's helpers, warnings, types)


def test_the_face_still_answers_every_name_and_subpackage():
    import zerosim

    for name in zerosim.__all__:
        assert getattr(zerosim, name) is not None
    assert zerosim.precision.cast is zerosim.cast and zerosim.parallel.data.ZeroEngine is zerosim.ZeroEngine
    folders = {p.name for p in Path(zerosim.__file__).parent.iterdir() if (p / "__init__.py").is_file()}
    assert {"analysis", "cli", "models", "parallel", "teaching"} <= folders <= set(dir(zerosim))  # as an eager face's
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        zerosim.nonsense  # noqa: B018


def test_help_loads_no_command_and_no_numpy():
    code = "from zerosim.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    loaded = loaded_by(code)
    commands = [m for m in loaded if m.startswith("zerosim.cli.") and m.endswith("_cmd")]
    assert commands == [] and "numpy" not in loaded, loaded
    assert [m for m in loaded if m.startswith("zerosim")] == ["zerosim", "zerosim._compat", "zerosim._lazy",
                                                             "zerosim.cli", "zerosim.cli.main"]


def test_a_command_loads_its_own_module_only():
    code = "from zerosim.cli.main import main\ntry:\n    main(['replay', '--help'])\nexcept SystemExit:\n    pass"
    commands = [m for m in loaded_by(code) if m.startswith("zerosim.cli.") and m.endswith("_cmd")]
    assert commands == ["zerosim.cli.replay_cmd"]


# What a command's parser may load of zerosim besides the command line's own modules (zerosim/cli/): the package
# and its shim, and zerosim.outputs (a few path checks, no NumPy). Its choices come from zerosim/cli/choices.py.
PARSER_MAY_LOAD = {"zerosim", "zerosim._compat", "zerosim._lazy", "zerosim.outputs"}
MOST_CLI_MODULES = 17  # timeline's loads 16: these four, zerosim.cli, main, choices, its module, 8 argument modules
RUN_MAIN = "from zerosim.cli.main import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass"


@pytest.mark.parametrize("argv", [[name, "--help"] for name in COMMANDS] + [["memory", "--model", "nonsense"],
                                                                           ["train", "--optimizer", "nonsense"]],
                         ids=lambda argv: " ".join(argv))
def test_a_commands_help_and_parsing_load_no_machinery(argv):
    """`zerosim <command> --help` (and a refused argument) builds the command's parser alone: no NumPy, no engine, no
    model; the command's run imports those (issue 41: commands that start at once)."""
    loaded = loaded_by(RUN_MAIN.format(argv=argv))
    ours = [m for m in loaded if m.startswith("zerosim")]
    assert "numpy" not in loaded and "ml_dtypes" not in loaded, ours
    assert {m for m in ours if not m.startswith("zerosim.cli")} <= PARSER_MAY_LOAD, ours
    assert len(ours) <= MOST_CLI_MODULES, ours


# What the README's main job loads (issue 63): seed 004's ZeRO step and its narration, not the mesh's, TP's, CP's and
# PP's replays and machinery (zerosim/replay's face is lazy), and no tqdm where no bar shows (its stdout and stderr are
# pipes here: zerosim/progress.py hands the loop back as it is). Before: 195 of zerosim's modules, 118 after.
NOT_IN_THE_REPLAY = ("zerosim.replay._context", "zerosim.replay._mesh", "zerosim.replay._pipeline",
                     "zerosim.replay._tensor", "zerosim.parallel.context", "zerosim.parallel.pipeline",
                     "zerosim.parallel.tensor", "tqdm", "asyncio")
MOST_REPLAY_MODULES = 120


def test_the_main_job_loads_seed_004s_step_and_not_the_replays_beside_it():
    loaded = loaded_by(RUN_MAIN.format(argv=["replay"]))
    ours = [m for m in loaded if m.startswith("zerosim")]
    assert "zerosim.replay._text" in ours and "zerosim.parallel.data._engine" in ours, ours  # it ran
    assert not [m for m in loaded if m.startswith(NOT_IN_THE_REPLAY)], ours
    assert len(ours) <= MOST_REPLAY_MODULES, len(ours)


# What a first script's names load (issue 63): the engine and what a default ZeRO engine runs, not the features beside
# it, each imported where it is used (zerosim/_lazy.py's faces, and the recipes' own imports in their functions)
FIRST_SCRIPT = "from zerosim import MLP, Adam, Cluster, ZeroEngine"
NOT_IN_A_FIRST_SCRIPT = (
    "zerosim.models.gpt", "zerosim.models.llama", "zerosim.models.hf", "zerosim.models.meta",  # the other families
    "zerosim.models.layers._attention", "zerosim.models.layers._flash_attention",  # their layers
    "zerosim.collectives.chunk_maps", "zerosim.collectives.quantized", "zerosim.precision.quantize",  # their wires
    "zerosim.parallel.data.muon._step", "zerosim.optim._adan", "zerosim.optim._lion",  # other optimizers
    "concurrent.futures",  # the rank pool's threads: workers > 1 only
    "zerosim.parallel.data.zeropp._wire", "zerosim.optim._muon",  # ZeRO++'s wires, Muon: by their faces, when asked
    "zerosim.cluster._recording", "zerosim.parallel._spec", "zerosim.precision.cast._meta_array",  # pp, tp, meta
    # the exact values of the few portable exp/log/power arguments in doubt, and the standard library's decimal and
    # fractions they hold (1.4 ms): imported by the first such argument (_correctly_rounded.py, _round_once.py)
    "zerosim.precision.arithmetic._exact_values", "decimal", "fractions",
    "threading",  # a second worker's (_pool.py): locks and thread-locals come from _thread
    "bisect",  # a folding trace window's (_window.py StepRuns)
    "zerosim.optim._cpu_adam", "zerosim.optim._fma",  # formula="deepspeed-cpu", formula="torch"'s fused adds
    "zerosim.precision.cast._stochastic", "zerosim.precision.cast._counter_random",  # stochastic rounding
    "zerosim.parallel.data.multinode._group_layout",  # shard groups (HSDP, MiCS)
    "zerosim.parallel.data.layouts._partition",  # DeepSpeed's and FSDP2's per-parameter shards (the default is flat)
    "zerosim.precision.cast._standin",  # NumPy standing in for CuPy (the device path's tests)
    "zerosim.precision.cast._bf16_bits", "zerosim.precision.cast._subnormals",  # a device's bf16 bits, subnormals
    "zerosim.collectives._ring",  # hop by hop: kept values, another process's ranks (the twin is _fast.py)
    "zerosim.precision.arithmetic._norm_bound",  # the products bounded by the norms (fp32's, wide narrow ones)
    "ml_dtypes",  # bf16's and fp8's dtypes (4-5 ms): read by their formats' first use (precision/_formats.py)
)
MOST_FIRST_SCRIPT_MODULES = 97  # 112 at issue 63 (175 before); 115 with the pipeline's and context parallelism's
# (cluster._recording, parallel._spec, precision.cast._meta_array); 106 with the cluster, parallel, cast, arithmetic,
# mlp and layouts faces lazy and the engine reaching ZeRO++ and Muon by their faces; 96 with zerosim._dataclass in
# and the features a default step does not run (CPU Adam, stochastic rounding, per-parameter and group layouts, the
# device paths, the ring hop by hop, the norms' bound) imported where they are used; 97 with the step's collector
# threshold (zerosim._collector, ~0.9 ms less a small step)


def test_a_first_scripts_names_load_the_engine_and_not_the_features_beside_it():
    loaded = loaded_by(FIRST_SCRIPT)
    ours = [m for m in loaded if m.startswith("zerosim")]
    assert not [m for m in loaded if m.startswith(NOT_IN_A_FIRST_SCRIPT)], ours
    assert len(ours) <= MOST_FIRST_SCRIPT_MODULES, len(ours)


# Each record the first script's names define, as a fresh interpreter has it after the import: where its __eq__ was
# written, and whether its __init__ is compiled yet
RECORDS = FIRST_SCRIPT + """
import dataclasses, inspect, json, sys
rows = []
for name, module in sorted(sys.modules.items()):
    if name.startswith("zerosim"):
        for cls in [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == name]:
            if dataclasses.is_dataclass(cls):
                eq = vars(cls).get("__eq__")
                rows.append([f"{name}.{cls.__qualname__}", getattr(getattr(eq, "__code__", None), "co_filename", ""),
                             inspect.isfunction(vars(cls).get("__init__"))])
print(json.dumps(rows))
"""
MOST_RECORDS_MADE_AT_IMPORT = 11  # by the import's own tables: Format, MixedPrecision, Recipe, ReduceOp, Plan, ...


def test_a_first_scripts_records_are_zerosims_and_compile_only_what_the_import_makes():
    """Python 3.11's dataclasses compile six methods for each frozen record (27 ms of the first script's import for
    its 50 records); zerosim/_dataclass.py's compiles a record's __init__ when the first one is made and shares the
    rest. A record made by the standard library's decorator, or an __init__ compiled for a record nobody made yet,
    puts that cost back."""
    out = subprocess.run([sys.executable, "-c", RECORDS], capture_output=True, text=True, check=True)
    rows = json.loads(out.stdout.splitlines()[-1])
    assert len(rows) >= 40, len(rows)
    assert [name for name, eq, _ in rows if eq and not eq.endswith("_dataclass.py")] == []
    compiled = [name for name, _, init in rows if init]
    assert len(compiled) <= MOST_RECORDS_MADE_AT_IMPORT, compiled


# An fp32 engine's step needs no ml_dtypes (its formats' dtypes are read when first wanted: precision/_formats.py);
# a bf16 one, or anyone's ml_dtypes array, finds those formats as before
FORMATS_LATER = FIRST_SCRIPT + """
import json, sys
import numpy as np
from zerosim.models import make_regression
engine = ZeroEngine(MLP([4, 8, 2]), Cluster(2), stage=3, optimizer=Adam(lr=1e-3), precision="{precision}")
engine.step(make_regression(np.random.default_rng(0), 2, 4, [4, 8, 2]))
rows = ["ml_dtypes" in sys.modules]
import ml_dtypes
from zerosim.precision import FORMAT_BY_DTYPE, FORMATS, cast, format_of, get_format, is_ml_dtype
bf16 = np.dtype(ml_dtypes.bfloat16)
rows.append(format_of(np.zeros(2, bf16)).name)  # ml_dtypes' own array, before any format's dtype was asked for
rows.append([str(FORMATS[name].dtype) for name in ("bf16", "fp8_e4m3", "fp8_e5m2")])
rows.append([FORMAT_BY_DTYPE.get(np.dtype(t)).name for t in (ml_dtypes.bfloat16, ml_dtypes.float8_e5m2)])
rows.append([is_ml_dtype(np.dtype(t)) for t in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.float16, "V2")])
x = np.array([1 + 2**-8 + 2**-20, 3.0], np.float32)
rows.append([int(v) for v in cast(x, "bf16").view(np.uint16)] + [str(cast(x, "fp8_e4m3").dtype)])
print(json.dumps(rows))
"""


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_an_fp32_step_reads_no_ml_dtypes_and_their_formats_are_found_when_wanted(precision):
    out = subprocess.run([sys.executable, "-c", FORMATS_LATER.format(precision=precision)], capture_output=True,
                         text=True, check=True)
    loaded, found, dtypes, by_dtype, ml, bits = json.loads(out.stdout.splitlines()[-1])
    assert loaded is (precision == "bf16-mixed")
    assert found == "bf16" and dtypes == ["bfloat16", "float8_e4m3fn", "float8_e5m2"] and by_dtype == ["bf16",
                                                                                                       "fp8_e5m2"]
    assert ml == [True, True, False, False]
    # 1 + 2**-8 + 2**-20 rounds up to 1 + 2**-7 in bf16 (0x3F81: past the tie at 2**-8); 3.0 is 0x4040
    assert bits == [0x3F81, 0x4040, "float8_e4m3fn"]


PUBLIC_TABLE_FIRST = """
import json, sys
import numpy as np
from zerosim.precision import FORMAT_BY_DTYPE
import ml_dtypes
print(json.dumps(sorted(f.name for f in FORMAT_BY_DTYPE.values())
                 + [FORMAT_BY_DTYPE[np.dtype(ml_dtypes.bfloat16)].name]))
"""


def test_the_public_dtype_table_holds_every_format_when_read_first():
    # FORMAT_BY_DTYPE read before any format's dtype (a user's first look): bf16 and fp8 are in it, as when
    # ml_dtypes was imported with the formats; the engine's own look-ups (known_format) read it as it stands
    out = subprocess.run([sys.executable, "-c", PUBLIC_TABLE_FIRST], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == ["bf16", "fp16", "fp32", "fp64", "fp8_e4m3", "fp8_e5m2", "bf16"]


LAZY_FACES = ("zerosim.backends.cupy", "zerosim.backends.mpi",
              "zerosim.models", "zerosim.models.layers", "zerosim.models.mlp", "zerosim.cluster", "zerosim.collectives",
              "zerosim.collectives.chunk_maps", "zerosim.collectives.quantized", "zerosim.optim", "zerosim.parallel",
              "zerosim.parallel.data", "zerosim.parallel.data.layouts", "zerosim.parallel.data.multinode",
              "zerosim.parallel.data.muon", "zerosim.parallel.data.recipes", "zerosim.parallel.data.zeropp",
              "zerosim.precision", "zerosim.precision.arithmetic", "zerosim.precision.cast",
              "zerosim.precision.quantize")


@pytest.mark.parametrize("face", LAZY_FACES)
def test_a_lazy_face_answers_every_name_and_none_hides_a_submodule(face):
    # a name equal to one of the face's submodules would lose its place to that module the first time the module is
    # imported (precision's `cast`: the function and the subpackage), so such a name stays eager
    import importlib
    import pkgutil

    module = importlib.import_module(face)
    submodules = {m.name for m in pkgutil.iter_modules(module.__path__)}
    lazy = set(getattr(module, "_NAMES", {}) and [n for names in module._NAMES.values() for n in names])
    assert not lazy & submodules, lazy & submodules
    for name in module.__all__:
        assert getattr(module, name) is not None and name in dir(module)
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        module.nonsense  # noqa: B018


FACE_ALONE = """
import json, sys
import {parent}
before = set(sys.modules)
import {face}
print(json.dumps(sorted(m for m in set(sys.modules) - before if type(sys.modules[m]).__name__ != "_Moved")))
"""


# precision imports its `cast` eagerly (see above), so precision and cast load more; cast's own others wait
# (_meta_array: NOT_IN_A_FIRST_SCRIPT)
@pytest.mark.parametrize("face", [f for f in LAZY_FACES if f not in ("zerosim.precision", "zerosim.precision.cast")])
def test_a_lazy_face_loads_nothing_of_its_own_until_a_name_is_asked_for(face):
    """Importing a lazy face beside its parent adds the face alone: each module behind it waits for its first name
    (issue 63: `from zerosim import ZeroEngine` loads what the engine's own imports name, not a face's others)."""
    out = subprocess.run([sys.executable, "-c", FACE_ALONE.format(parent=face.rsplit(".", 1)[0], face=face)],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == [face]
