"""zerosim/nano.py, the reading unit, is bit for bit the engine and the oracle (STYLE.md item 19).

    equal        Hypothesis draws MLP shapes, N ranks (P a multiple of N or not), K micro-steps and steps, for each
                 stage 0-3 and fp32 / fp16-mixed / bf16-mixed: every rank's loss each step, the (P,) fp32 masters
                 and 16-bit params after the last are `ZeroEngine`'s and `Reference`'s, bit for bit (50 examples a
                 stage, 200 in all); a fixed uneven case per stage in the fast lane
    the ring     its reduce-scatter gives session 1's 2048 + 1 + 1 + 1 sums, as session 2's page says
    apart        nano.py stays a reading unit: at most 300 lines, importing only the kernels' faces (casts, the
                 layers' forward/backward pairs, the optimizer), and nothing in the package imports it
"""

import ast
from pathlib import Path

import numpy as np
import pytest
from helpers import bits
from hypothesis import event, given, settings
from hypothesis import strategies as st

import zerosim
from zerosim import MLP, Cluster, Reference, ZeroEngine
from zerosim.models import make_regression
from zerosim.nano import NanoZero, all_gather, reduce_scatter
from zerosim.optim import Adam

ROOT = Path(zerosim.__file__).resolve().parent
NANO = ROOT / "nano.py"
LR = 1e-2  # large enough that a few steps move every weight


def three(widths, n, stage, precision, k, steps, seed):
    """Run the engine, the oracle and nano side by side; check the losses every step and the states at the end."""
    model = MLP(widths)
    params = model.init_params(np.random.default_rng(seed))
    engine = ZeroEngine(model, Cluster(n), stage, Adam(lr=LR), precision, params=params, accumulation_steps=k)
    oracle = Reference(model, Adam(lr=LR), precision, world_size=n, params=params, accumulation_steps=k,
                       reduce_every_micro_step=stage >= 2)
    nano = NanoZero(widths, n, stage, precision, params=params, lr=LR, accumulation_steps=k)
    data = make_regression(np.random.default_rng(seed + 1), steps * n * k, 3, widths)
    for s in range(steps):
        mine = data[s * n * k : (s + 1) * n * k]
        batches = [mine[r * k : (r + 1) * k] for r in range(n)]
        want = engine.step(batches)
        assert oracle.step(batches) == want
        assert nano.step(batches) == want, f"step {s}"
    for got, name in ((nano.full_master(), "master"), (nano.full_params(), "16-bit params")):
        want = engine.full_master() if name == "master" else engine.full_params()
        assert np.array_equal(bits(got), bits(want)), f"{name}: nano != engine"
        want = oracle.master() if name == "master" else oracle.compute_params()
        assert np.array_equal(bits(got), bits(want)), f"{name}: nano != oracle"
    assert nano.t == engine.t == oracle.t == steps


def drawn(widths, n, stage, precision, k, steps, seed):
    """`three` on a Hypothesis draw, counting the uneven ones (--hypothesis-show-statistics shows how many)."""
    P = sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))
    event("uneven: P not a multiple of N" if P % n else "even: P a multiple of N")
    three(widths, n, stage, precision, k, steps, seed)


DRAWS = dict(
    widths=st.lists(st.integers(1, 6), min_size=2, max_size=4),  # 1 to 3 Linear layers, P from 2 to 126
    n=st.integers(1, 6),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed"]),
    k=st.integers(1, 3),
    steps=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)


@pytest.mark.slow  # 50 examples a stage, about a second each stage on a quiet machine
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@settings(max_examples=50)
@given(**DRAWS)
def test_each_stage_equals_the_engine_and_the_oracle(stage, widths, n, precision, k, steps, seed):
    drawn(widths, n, stage, precision, k, steps, seed)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_an_uneven_model_equals_the_engine_and_the_oracle(stage):
    # 4·7+7 + 7·3+3 = 59 parameters on 4 ranks: s = 15, one padding element, both layers straddle shards
    assert 59 % 4
    three([4, 7, 3], 4, stage, "fp16-mixed", 2, 2, 5)


def test_the_ring_gives_session_ones_sums():
    # docs/tutorials/02-one-zero-step.md: four fp16 ranks, rank 0 holding 2048 in every chunk, the others 1
    xs = [np.full(4, 2048, np.float16)] + [np.ones(4, np.float16) for _ in range(3)]
    got = reduce_scatter(xs)
    # chunk 0: ((1 + 1) + 1) + 2048 = 2051, a tie, to even: 2052; chunk 1: ((1 + 1) + 2048) + 1: 2050, then 2051 ->
    # 2052; chunks 2 and 3 meet 2048 early: 2049 -> 2048, and each later + 1 is lost the same way
    assert [float(g[0]) for g in got] == [2052.0, 2052.0, 2048.0, 2048.0]
    assert [g.dtype for g in got] == [np.float16] * 4
    assert all(np.array_equal(a, np.array([2052, 2052, 2048, 2048], np.float16)) for a in all_gather(got))


# -- apart from the package ------------------------------------------------------------------------------------
def imported(source: str) -> set:
    """The modules a source imports (`from m import x` gives m; `import m` gives m)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_nano_is_short_and_imports_only_the_kernels_faces():
    text = NANO.read_text()
    assert len(text.splitlines()) <= 300
    zerosim_imports = {m for m in imported(text) if m.startswith("zerosim")}
    assert zerosim_imports == {"zerosim.models", "zerosim.optim", "zerosim.precision"}
    assert imported(text) - zerosim_imports <= {"__future__", "numpy"}


def test_nothing_in_the_package_imports_nano():
    assert "zerosim.nano" in imported("from zerosim.nano import NanoZero")  # the checker sees one
    users = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py")
             if p != NANO and any(m.split(".")[:2] == ["zerosim", "nano"] for m in imported(p.read_text()))]
    assert not users
