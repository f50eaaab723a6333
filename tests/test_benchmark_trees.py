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


class Counted:
    """A stand-in worker: each step answers with how many steps it has taken (no process, no clock)."""

    def __init__(self, names, log):
        self.names, self.log, self.taken = names, log, 0

    def step(self, name):
        self.log.append((self, name))
        self.taken += 1
        return float(self.taken)


def test_in_turns_steps_every_contender_of_both_trees_once_a_round_in_shuffled_orders_and_drops_the_warm_up():
    log, rounds = [], []
    workers = {"this": Counted(["a", "b"], log), "that": Counted(["a", "b"], log)}
    cpu = trees.in_turns(workers, 3, after_round=rounds.append)
    assert rounds == [0, 1, 2, 3]
    turns = [[(w is workers["this"], name) for w, name in log[i:i + 4]] for i in range(0, 16, 4)]
    assert all(sorted(t) == [(False, "a"), (False, "b"), (True, "a"), (True, "b")] for t in turns)
    assert len({tuple(t) for t in turns}) > 1  # the order moves from round to round (seed 0)
    assert all(len(v) == 3 for v in cpu.values())  # the warm-up round's answers (1.0 or 2.0) left out
    assert sum(map(sum, cpu.values())) == sum(range(3, 9)) * 2  # each worker's answers 3..8, its rounds 1-3


def test_compared_gives_the_ratio_of_the_medians_and_the_quartiles_of_each_rounds_own_ratio():
    cpu = {("this", "x"): [1.0, 2.0, 3.0, 4.0, 5.0], ("that", "x"): [2.0, 2.0, 2.0, 2.0, 4.0]}
    # medians 3 and 2, so 1.5 (the median of the rounds' ratios is 1.25); the rounds' own ratios 0.5, 1, 1.5, 2, 1.25,
    # sorted 0.5, 1, 1.25, 1.5, 2, whose quartiles (statistics.quantiles' default, "exclusive": positions 1.5 and 4.5
    # of 5) are 0.75 and 1.75
    assert trees.compared(cpu, "x") == (3.0, 2.0, 1.5, (0.75, 1.75))
