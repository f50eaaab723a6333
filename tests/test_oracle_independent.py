"""The oracle shares no recipe code with the engine it checks (DESIGN.md "The oracle"; STYLE.md item 3).

    imports      nothing under zerosim/reference/ imports a private module (or a private name) of zerosim.parallel:
                 each recipe's reduction, bucketing and clipping is the oracle's own (reference/_recipes.py,
                 _chunk_maps.py, _clip.py); the checker is first shown imports it must catch
    independence a bug put into the engine's recipe code — its averaging, its DDP buckets, its clip coefficient —
                 makes the engine and the oracle disagree. While the oracle called the engine's recipe code, each of
                 these bugs was agreed with: the engine and the oracle still matched bit for bit.
"""

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from helpers import bits

import zerosim
from zerosim import MLP, Cluster, Reference, ZeroEngine
from zerosim.collectives import get_op
from zerosim.models import make_regression
from zerosim.optim import Adam
from zerosim.parallel.data import CommSchedule
from zerosim.parallel.data.recipes import DDPBuckets

ROOT = Path(zerosim.__file__).resolve().parent


def private_parallel_imports(source: str) -> list:
    """(line, what) of every import of a private module or name of zerosim.parallel: a dotted part or an imported
    name that starts with an underscore."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("zerosim.parallel"):
            parts = node.module.split(".")
            names = [a.name for a in node.names]
            if any(p.startswith("_") for p in parts) or any(n.startswith("_") for n in names):
                found.append((node.lineno, f"from {node.module} import {', '.join(names)}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("zerosim.parallel") and any(p.startswith("_") for p in alias.name.split(".")):
                    found.append((node.lineno, f"import {alias.name}"))
    return found


@pytest.mark.parametrize("line, caught", [
    ("from zerosim.parallel.data import _clipping as clipping", True),
    ("from zerosim.parallel.data.recipes._bucket_allreduce import flat_chunks", True),
    ("import zerosim.parallel.data.recipes._averaging", True),
    ("from zerosim.parallel.tensor._plan import SPLIT", True),
    ("from zerosim.parallel.data import _engine", True),
    ("from zerosim.parallel.data.recipes import GradientRecipe", False),  # a face's public name
    ("from zerosim.optim._by_matrix import step_by_matrix", False),  # not parallel/ (this checker's scope)
    ("from zerosim.reference import _recipes as recipes", False),  # the oracle's own
])
def test_the_checker_catches_a_private_import_of_parallel(line, caught):
    assert bool(private_parallel_imports(line)) == caught


def test_nothing_in_the_oracle_imports_a_private_module_of_parallel():
    files = sorted((ROOT / "reference").rglob("*.py"))
    assert len(files) >= 8
    found = {f.name: private_parallel_imports(f.read_text()) for f in files}
    assert not {k: v for k, v in found.items() if v}


# -- independence: a bug in the engine's recipe code is caught --------------------------------------------------
WIDTHS = [4, 7, 3]  # 35 + 24 = 59 parameters: uneven on N = 3 (s = 20, padding 1)


def engine_and_oracle(stage, n=3, recipe="seeds", steps=2, clip=None, ddp=None):
    """(the engine's, the oracle's) fp32 masters as bits after `steps` fp16-mixed steps, each side made the usual
    way; the oracle's losses and the engine's are not compared (a bug may change them too)."""
    model = MLP(WIDTHS)
    params = model.init_params(np.random.default_rng(3))
    comm = CommSchedule() if ddp is None else CommSchedule(bucket_cap_mb=ddp.bucket_cap_mb)
    engine = ZeroEngine(model, Cluster(n), stage, Adam(lr=1e-2), "fp16-mixed", params=params, recipe=recipe,
                        clip_grad=clip, comm=comm)
    oracle = Reference(model, Adam(lr=1e-2), "fp16-mixed", world_size=n, params=params, recipe=recipe,
                       reduce_every_micro_step=stage >= 2, clip_grad=clip, ddp=ddp)
    data = make_regression(np.random.default_rng(4), steps * n, 5, WIDTHS)
    for s in range(steps):
        engine.step(data[s * n:(s + 1) * n])
        oracle.step(data[s * n:(s + 1) * n])
    return bits(engine.full_master()), bits(oracle.master())


def test_unchanged_the_engine_and_the_oracle_agree():
    # the cases below, with nothing broken: equal bit for bit (so a difference below is the bug's)
    for stage, kw in [(1, {}), (0, dict(recipe="ddp", ddp=DDPBuckets(64 / 2**20))), (2, dict(clip=0.05))]:
        got, want = engine_and_oracle(stage, **kw)
        assert np.array_equal(got, want), (stage, kw)


def test_a_bug_in_the_engines_averaging_is_caught(monkeypatch):
    # the seeds' protocol with a plausible bug: each rank divides by N = 3 in fp16 before the sum (DeepSpeed's order)
    from zerosim.parallel.data.recipes import RECIPES
    wrong = dataclasses.replace(RECIPES["seeds"], op=lambda policy, n: get_op("avg_predivide"), divides_by_n=True)
    monkeypatch.setitem(RECIPES, "seeds", wrong)
    got, want = engine_and_oracle(1)
    assert not np.array_equal(got, want)


def test_a_bug_in_the_engines_ddp_buckets_is_caught(monkeypatch):
    # DDP's rebuilt buckets filled in registration order instead of gradient-ready order: other buckets, other
    # chunk maps, other ring orders (the second step runs on the rebuilt buckets)
    from zerosim.parallel.data.recipes import _param_buckets
    monkeypatch.setattr(_param_buckets, "ready_order", lambda params: list(params))
    got, want = engine_and_oracle(0, recipe="ddp", ddp=DDPBuckets(64 / 2**20), steps=3)
    assert not np.array_equal(got, want)


def test_a_bug_in_the_engines_clip_coefficient_is_caught(monkeypatch):
    # torch's `max_norm / (total_norm + 1e-6)` with another epsilon
    from zerosim.parallel.data import _clipping
    monkeypatch.setattr(_clipping, "EPS", 1e-2)
    got, want = engine_and_oracle(2, clip=0.05)
    assert not np.array_equal(got, want)
