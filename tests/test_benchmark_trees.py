"""benchmarks/trees.py, the workers behind `--tree DIR` of benchmarks/portable_step.py, yardstick.py and plan.py: a
worker imports the zerosim of the tree it is given (PYTHONPATH), steps the contender asked for, and answers with that
step's CPU seconds, measured inside it. No test here times anything (speed lives in benchmarks): the seconds are
checked to be the worker's CPU time, not the wall clock, by a step that sleeps, and to take in a process the step
waited for by one that reports its own CPU time."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import trees  # noqa: E402

PROBE = '''import subprocess
import sys
import time

from trees import Side

# a process of its own that spins until it has used `seconds` of CPU, then prints how much it used
CHILD = "import sys, time\\nwhile time.process_time() < float(sys.argv[1]): pass\\nprint(time.process_time())"


def side(rows):
    seen = []

    def child(seconds=0.3):
        return float(subprocess.run([sys.executable, "-c", CHILD, str(seconds)], check=True, capture_output=True,
                                    text=True).stdout)

    def fail():
        raise ValueError("a step that fails on purpose")

    return Side({"sleep": lambda: time.sleep(0.2), "busy": lambda: sum(range(rows)), "child": child, "fail": fail},
                after=lambda name, out: seen.append((name, out)), facts={"seen": lambda: seen})
'''


def made_up_tree(tmp_path):
    """A tree of a zerosim package of one empty file, and the module that builds its contenders (PROBE)."""
    (tmp_path / "zerosim").mkdir(parents=True)
    (tmp_path / "zerosim" / "__init__.py").write_text("")
    (tmp_path / "probe.py").write_text(PROBE)
    return str(tmp_path)


def test_a_worker_imports_the_tree_it_is_given_and_answers_with_its_steps_cpu_seconds(tmp_path):
    """A made-up tree (a zerosim package of one empty file, and the module that builds its contenders): the worker
    says it imported that tree, found only through PYTHONPATH, and a step that sleeps 0.2 s answers with well under
    0.2 CPU seconds (a wall clock would say 0.2)."""
    worker = trees.Worker(made_up_tree(tmp_path), "probe", "side", rows=3_000_000)
    try:
        assert worker.tree == str(tmp_path)
        assert worker.names == ["sleep", "busy", "child", "fail"]
        slept, busy = worker.step("sleep"), worker.step("busy")
        seen = worker.fact("seen")
    finally:
        worker.close()
    assert isinstance(slept, float) and 0 <= slept < 0.1
    assert isinstance(busy, float) and busy > 0
    assert seen == [("sleep", None), ("busy", sum(range(3_000_000)))]  # `after` got each step's own answer


@pytest.mark.slow  # a worker and a process of its own spinning 0.3 CPU seconds
def test_a_steps_cpu_seconds_take_in_the_process_it_started_and_waited_for(tmp_path):
    """plan.py's command runs in a fresh process its worker starts: that process's CPU counts. The child spins until
    it has used 0.3 s of its own CPU and says how much it used (the worker's own share is a spawn, ~1 ms)."""
    worker = trees.Worker(made_up_tree(tmp_path), "probe", "side", rows=1)
    try:
        seconds = worker.step("child")
        ((name, its_own),) = worker.fact("seen")
    finally:
        worker.close()
    assert name == "child" and its_own >= 0.3
    assert seconds >= its_own


def test_a_failure_in_the_worker_comes_back_naming_the_tree_and_the_worker_goes_on(tmp_path):
    worker = trees.Worker(made_up_tree(tmp_path), "probe", "side", rows=1)
    try:
        with pytest.raises(RuntimeError, match=f"in the worker for {tmp_path}:\n(.|\n)*ValueError: a step that fails"):
            worker.step("fail")
        with pytest.raises(RuntimeError, match="KeyError: 'no such contender'"):
            worker.step("no such contender")
        with pytest.raises(RuntimeError, match="ValueError: unknown request 'bogus'"):
            worker._ask(("bogus",))
        assert worker.step("sleep") < 0.1  # still answering
    finally:
        worker.close()
    assert worker.proc.returncode == 0  # ended on "stop"


def test_workers_whose_build_fails_leave_no_process_behind(tmp_path, monkeypatch):
    """The second side's module does not exist: its build fails naming its tree, and both workers' processes have
    ended by the time `started` gives the error back (the first one closed, the failed one too)."""
    spawned = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            spawned.append(self)

    monkeypatch.setattr(trees.subprocess, "Popen", Recorded)
    this, that = made_up_tree(tmp_path / "this"), made_up_tree(tmp_path / "that")
    (tmp_path / "that" / "probe.py").unlink()
    with pytest.raises(RuntimeError, match=f"in the worker for {that}:\n(.|\n)*No module named 'probe'"):
        with trees.started({"this": this, "that": that}, "probe", "side", rows=1):
            pytest.fail("the workers started")  # never reached: the build failed
    assert len(spawned) == 2 and all(p.poll() is not None for p in spawned)


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


def test_quartiles_of_one_value_are_that_value_twice_and_of_more_statistics_exclusive_cut_points():
    assert trees.quartiles([0.7]) == (0.7, 0.7)
    assert trees.quartiles([4.0, 1.0, 3.0, 2.0]) == (1.25, 3.75)  # sorted 1..4: positions 1.25 and 3.75 of 4


def test_compared_gives_the_ratio_of_the_medians_and_the_quartiles_of_each_rounds_own_ratio():
    cpu = {("this", "x"): [1.0, 2.0, 3.0, 4.0, 5.0], ("that", "x"): [2.0, 2.0, 2.0, 2.0, 4.0]}
    # medians 3 and 2, so 1.5 (the median of the rounds' ratios is 1.25); the rounds' own ratios 0.5, 1, 1.5, 2, 1.25,
    # sorted 0.5, 1, 1.25, 1.5, 2, whose quartiles (statistics.quantiles' default, "exclusive": positions 1.5 and 4.5
    # of 5) are 0.75 and 1.75
    assert trees.compared(cpu, "x") == (3.0, 2.0, 1.5, (0.75, 1.75))


# (script, its arguments, the words of the refusal): "TREE" stands for a folder with no zerosim/ in it, "NOWHERE" for
# a path that does not exist
REFUSALS = [
    ("portable_step", ["--tree", "NOWHERE"], "argument --tree: NOWHERE: no such folder"),
    ("portable_step", ["--tree", "TREE"], "argument --tree: TREE: no zerosim/ folder there"),
    ("portable_step", ["--tree", ".", "--faults"], "--faults counts this process's page faults; with --tree"),
    ("yardstick", ["--tree", "NOWHERE"], "argument --tree: NOWHERE: no such folder"),
    ("yardstick", ["--tree", "TREE"], "argument --tree: TREE: no zerosim/ folder there"),
    ("plan", ["--tree", "NOWHERE"], "argument --tree: NOWHERE: no such folder"),
    ("plan", ["--tree", "TREE"], "argument --tree: TREE: no zerosim/ folder there"),
    *((script, ["--repeats", "0"], "argument --repeats: 0: at least 1 (the timed rounds")
      for script in ("portable_step", "yardstick", "plan")),  # a median of no rounds: they failed after the work
    ("yardstick", ["--repeats", "two"], "argument --repeats: 'two': not a whole number of rounds"),
]


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("script, argv, said", REFUSALS, ids=[f"{s}-{' '.join(a)}" for s, a, _ in REFUSALS])
def test_a_script_refuses_what_it_cannot_measure_naming_the_flag_and_the_path_before_any_work(
        script, argv, said, tmp_path, monkeypatch, capsys):
    """Refused while the arguments are parsed: argparse's error (exit 2) names the flag and the path, nothing is
    printed on stdout and no worker starts (a worker starting fails the test, not a refusal)."""
    import importlib

    module = importlib.import_module(script)
    monkeypatch.setattr(module, "started", lambda *a, **k: pytest.fail("a worker started: the work began"))
    paths = {"TREE": str(tmp_path), "NOWHERE": str(tmp_path / "no such folder")}
    monkeypatch.chdir(ROOT)  # "." is this source tree: only --faults is wrong there
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *(paths.get(a, a) for a in argv)])
    with pytest.raises(SystemExit) as exit_:
        module.main()
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    for placeholder, path in paths.items():
        said = said.replace(placeholder, path)
    assert f"{script}.py: error: {said}" in err


# (this ÷ that of the medians of one contender, the same code in both workers; whether a run says they read apart)
WORKERS_APART = [
    (1.0, False),  # alike
    (1.05, False),  # 5 % slower: the edge, still alike
    (0.95, False),  # 5 % faster: the other edge
    (1.06, True),  # past it
    (0.94, True),
    (1.226, True),  # a 10M native step, 303.8 ms against 247.8, in one run (2026-11-26)
]


@pytest.mark.parametrize("ratio, said", WORKERS_APART)
def test_a_run_says_when_the_same_code_reads_apart_in_its_two_workers(ratio, said):
    warning = trees.workers_apart("native", ratio)
    assert (warning is not None) == said
    if said:
        assert f"native steps, the same code in both trees, read {ratio:.3f} apart" in warning


@pytest.mark.slow  # two processes of their own
def test_a_child_reads_a_trees_modules_compiled_once_even_where_bytecode_is_not_to_be_written(tmp_path, monkeypatch):
    """`compiled_child`: a child started with it writes a tree's bytecode into the run's own cache (not into the tree),
    even with PYTHONDONTWRITEBYTECODE set around it, and a second child reads it from there: a fresh worktree is not
    timed compiling its modules in every process (benchmarks/README.md, the twenty-fourth round)."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(trees, "_CACHE", [])
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "probe_module.py").write_text("VALUE = 7\n")
    python, env = trees.compiled_child()
    assert "PYTHONDONTWRITEBYTECODE" not in env
    ask = "import probe_module, sys; print(probe_module.__cached__, 'probe_module' in sys.modules)"
    cached = [subprocess.run([*python, "-c", ask], cwd=tmp_path / "tree", env=env, capture_output=True, text=True,
                             check=True).stdout.split()[0] for _ in range(2)]
    assert cached[0] == cached[1] and Path(cached[0]).exists()
    assert Path(cached[0]).is_relative_to(trees._CACHE[0]) and not (tmp_path / "tree" / "__pycache__").exists()
