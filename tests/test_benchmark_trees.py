"""benchmarks/trees.py, the workers behind `--tree DIR` of benchmarks/portable_step.py and yardstick.py: a worker
imports the zerosim of the tree it is given (PYTHONPATH), steps the contender asked for, and answers with that step's
CPU seconds, measured inside it. No test here times anything (speed lives in benchmarks): the seconds are checked to
be the worker's CPU time, not the wall clock, by a step that sleeps."""

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import trees  # noqa: E402

PROBE = '''import time

from trees import Side


def side(rows):
    return Side({"sleep": lambda: time.sleep(0.2), "busy": lambda: sum(range(rows))})
'''


def test_a_worker_imports_the_tree_it_is_given_and_answers_with_its_steps_cpu_seconds(tmp_path):
    """A made-up tree (a zerosim package of one empty file, and the module that builds its contenders): the worker
    says it imported that tree, found only through PYTHONPATH, and a step that sleeps 0.2 s answers with well under
    0.2 CPU seconds (a wall clock would say 0.2)."""
    (tmp_path / "zerosim").mkdir()
    (tmp_path / "zerosim" / "__init__.py").write_text("")
    (tmp_path / "probe.py").write_text(PROBE)
    worker = trees.Worker(str(tmp_path), "probe", "side", rows=3_000_000)
    try:
        assert worker.tree == str(tmp_path)
        assert worker.names == ["sleep", "busy"]
        slept, busy = worker.step("sleep"), worker.step("busy")
    finally:
        worker.close()
    assert isinstance(slept, float) and 0 <= slept < 0.1
    assert isinstance(busy, float) and busy > 0


def test_a_worker_steps_the_engine_it_was_fed_on_the_tree_it_names():
    """This tree on the worker's side, a tiny model: the worker names this tree, its engine's step answers with CPU
    seconds, and its masters after that step are the bits of the same engine stepped here, in this process, from the
    same parameters and batches (so the worker stepped what it was fed, once)."""
    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.models import make_regression
    from zerosim.precision import get_precision

    widths, n = [8, 16, 4], 2
    params = MLP(widths).init_params()
    batches = make_regression(np.random.default_rng(0), n, 4, widths)
    worker = trees.Worker(str(ROOT), "yardstick", "tree_side", widths=widths, n=n, arithmetics=("native",),
                          adds="ml_dtypes", params=params, batches=batches)
    try:
        assert worker.tree == str(ROOT)
        seconds = worker.step(("engine", "native"))
        masters = worker.fact("masters")
    finally:
        worker.close()
    assert isinstance(seconds, float) and seconds > 0
    here = ZeroEngine(MLP(widths), Cluster(n), 3, Adam(lr=1e-3), get_precision("bf16-mixed").with_(arithmetic="native"),
                      params=params)
    here.step(batches)
    assert masters["native"].view(np.uint32).tolist() == here.full_master().view(np.uint32).tolist()
