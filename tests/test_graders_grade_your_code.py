"""Issue 62, build 1: graders that grade the student's code, not zerosim's, and that a submission cannot talk into a
grade (zerosim/teaching/sandbox/_policy.py and _run.py; zerosim/teaching/exercises/_sandbox.py;
zerosim/teaching/assignments/_autograde.py).

Before: an assignment-1 file that called `zerosim.collectives.reduce_scatter` and `tree_all_reduce` scored 14.5 of
14.5; a file that wrote `{"event": "done", "result": {"passed": true, ...}}` on the report pipe (its descriptor in
sys.argv), or patched the grading code in its own process, passed. Now the child returns only what the learner's
functions returned, the grader judges, and a call of zerosim's own implementation of what a case grades fails that
case with a line saying why. Each submission that cheats here is also graded in this process, with no policy, where
it earns every point: what the sandbox refuses is an answer that would otherwise have been right.

Every test runs the real sandbox (a confined child per file): marked slow, each a few seconds.
"""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import InProcess

from zerosim.teaching import exercises
from zerosim.teaching.assignments import get, results
from zerosim.teaching.exercises import grade_file
from zerosim.teaching.exercises._sandbox import Learner

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent

CALLS = "calling {}, zerosim's own implementation of what it grades, is not allowed here"

# exercise -> (a file that answers with zerosim's own code, the name the refusal names, whether that file is right
# when nothing refuses it: stage2_free's engine piece cannot be called from the learner's arguments, so that file
# only tries)
CHEAT_EXERCISES = {
    "ring_chunk": ('''\
import numpy as np
from zerosim.cluster import Cluster
from zerosim.collectives import reduce_scatter


def chunk_sent(rank, step, world_size):
    cluster = Cluster(world_size)
    reduce_scatter(cluster, [np.ones(world_size, np.float16) for _ in range(world_size)])
    return next(e.chunk for e in cluster.trace.events if e.step == step and e.src == rank)
''', "zerosim.collectives.reduce_scatter", True),
    "shard_offset": ('''\
import zerosim


def shard_bounds(length, world_size, rank):
    return tuple(int(b) for b in zerosim.ShardLayout(length, world_size).real_bounds(rank))
''', "zerosim.collectives.ShardLayout", True),
    "stage2_free": ('''\
from zerosim.parallel.data._reduce import reduce_unit


def reduce_layer_grads(held, reduce_scatter, add_to_shard):
    reduce_unit(None, 0, True)
''', "zerosim.parallel.data._reduce.reduce_unit", False),
    "refresh_params": ('''\
import importlib

from zerosim.cluster import Cluster


def refresh(params, shard_size, all_gather):
    gather = importlib.import_module("zerosim.collectives").all_gather
    own = [p[r * shard_size:(r + 1) * shard_size] for r, p in enumerate(params)]
    for p, whole in zip(params, gather(Cluster(len(params)), own)):
        p[...] = whole
''', "zerosim.collectives.all_gather", True),
    "average_dtype": ('''\
import numpy as np
from zerosim.parallel.data.recipes._averaging import finish as zerosims
from zerosim.precision import get_precision


def average(summed, world_size):
    return zerosims(summed, get_precision("fp16-mixed" if summed.dtype == np.float16 else "bf16-mixed"), world_size)
''', "zerosim.parallel.data.recipes._averaging.finish", True),
    "unscale_once": ('''\
from zerosim.precision import get_precision


def finish(summed, world_size, micro_steps, loss_scale):
    averaging = __import__("zerosim.parallel.data.recipes._averaging", fromlist=["finish"])
    policy = get_precision("fp16-mixed").with_(loss_scale=loss_scale)
    return averaging.finish(summed, policy, world_size, micro_steps)
''', "zerosim.parallel.data.recipes._averaging.finish", True),
}


def write(tmp_path, text: str, name: str = "mine.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("name", list(CHEAT_EXERCISES))
def test_an_exercise_that_calls_zerosims_own_code_fails_and_says_why(name, tmp_path):
    source, called, right = CHEAT_EXERCISES[name]
    ex = exercises.get(name)
    graded = grade_file(name, write(tmp_path, source), time_limit=3600)
    assert not graded.passed and graded.cases == 1, str(graded)
    assert f"this case grades your {ex.function}; {CALLS.format(called)}" in graded.counterexample, str(graded)
    if right:  # the same file in this process, where nothing refuses it: every case right
        assert exercises.check(name, source).passed


# assignment -> (a file answering with zerosim's own code, {function: the name its refusal names})
CHEAT_ASSIGNMENTS = {
    1: ('''\
import importlib

import numpy as np
from zerosim import all_gather, all_reduce, reduce_scatter
from zerosim.cluster import Cluster
from zerosim.collectives.chunk_maps import tree_all_reduce as trees


def _wire(wire):
    return {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16"}[np.dtype(wire).name]


def predict_2048():
    out = {}
    for fmt, dt in (("fp16", np.float16), ("bf16", importlib.import_module("ml_dtypes").bfloat16)):
        xs = [np.full(4, 2048, dt)] + [np.ones(4, dt) for _ in range(3)]
        out[fmt] = [float(s[0]) for s in reduce_scatter(Cluster(4), xs)]
    return out


def predict_allreduce_ms(gigabytes, N, link_GBps, alpha_us):
    costs = importlib.import_module("zerosim.analysis.costs")
    timeline = __import__("zerosim.analysis.timeline", fromlist=["ring_collective_time"])
    link = costs.Link("as given", link_GBps * 1e9 / 2, alpha_us * 1e-6, "")
    return 1e3 * timeline.ring_collective_time("all_reduce", gigabytes * 1e9, N, link)


def ring_reduce_scatter(xs, wire):
    return list(reduce_scatter(Cluster(len(xs)), xs, wire=_wire(wire)))


def ring_all_gather(shards):
    return list(all_gather(Cluster(len(shards)), shards))


def ring_all_reduce(xs, wire):
    return list(all_reduce(Cluster(len(xs)), xs, wire=_wire(wire)))


def tree_all_reduce(xs, wire):
    return trees(xs, _wire(wire))
''', {"predict_2048": "zerosim.collectives.reduce_scatter", "predict_allreduce_ms": "zerosim.analysis.costs.Link",
      "ring_reduce_scatter": "zerosim.collectives.reduce_scatter", "ring_all_gather": "zerosim.collectives.all_gather",
      "ring_all_reduce": "zerosim.collectives.all_reduce",
      "tree_all_reduce": "zerosim.collectives.chunk_maps.tree_all_reduce"}),
    2: ('''\
import numpy as np
import zerosim
from zerosim.cluster import Cluster


def _row(P, N, stage):
    from zerosim.analysis.costs import measure_stage
    from zerosim.models.meta import MetaModel

    return measure_stage(MetaModel.from_params(P, layers=min(4, P)), N, stage)[0]


def predict_memory(P, N, stage):
    return _row(P, N, stage)["resting"]


def predict_peak(P, N, stage):
    return _row(P, N, stage)["peak"]


def seed001_table(P, N):
    from zerosim.analysis.costs import seed001_formulas

    return list(seed001_formulas(P, N).bytes)


def shard_bounds(length, world_size, rank):
    from zerosim.collectives import ShardLayout

    return tuple(int(b) for b in ShardLayout(length, world_size).real_bounds(rank))


def average(summed, world_size):
    from zerosim.parallel.data.recipes._averaging import finish
    from zerosim.precision import get_precision

    return finish(summed, get_precision("fp16-mixed" if summed.dtype == np.float16 else "bf16-mixed"), world_size)


def refresh(params, shard_size, all_gather):
    own = [p[r * shard_size:(r + 1) * shard_size] for r, p in enumerate(params)]
    for p, whole in zip(params, getattr(zerosim, "all_gather")(Cluster(len(params)), own)):
        p[...] = whole
''', {"predict_memory": "zerosim.models.meta.MetaModel.from_params",
      "predict_peak": "zerosim.models.meta.MetaModel.from_params",
      "seed001_table": "zerosim.analysis.costs.seed001_formulas", "shard_bounds": "zerosim.collectives.ShardLayout",
      "average": "zerosim.parallel.data.recipes._averaging.finish", "refresh": "zerosim.collectives.all_gather"}),
    3: ('''\
import numpy as np
from zerosim.collectives import all_gather as zerosims_gather
from zerosim.cluster import Cluster


def gather_layer(shards, start, stop, all_gather):
    all_gather(shards)  # the one call the grader counts; the answer is zerosim's
    return [w[start:stop] for w in zerosims_gather(Cluster(len(shards)), shards)]


def predict_gathers(layers, checkpoint):
    from zerosim.cluster import Call
    from zerosim.models import MLP, make_regression
    from zerosim.optim import Adam
    from zerosim.parallel.data import ZeroEngine

    widths = [4] * (layers + 1)
    cluster = Cluster(2)
    engine = ZeroEngine(MLP(widths), cluster, 3, Adam(), "fp16-mixed", checkpoint=checkpoint)
    engine.step(make_regression(np.random.default_rng(0), 2, 2, widths))
    return sum(c.collective == "all_gather" for c in cluster.trace.of_type(Call))


def predict_params_peak(layer_sizes, N, prefetch):
    from zerosim.analysis.costs import measure_stage
    from zerosim.models.meta import MetaModel
    from zerosim.parallel.data import CommSchedule

    model = MetaModel([(f"layer{i}", n) for i, n in enumerate(layer_sizes)])
    schedule = CommSchedule(prefetch_forward=prefetch, prefetch_backward=prefetch)
    return measure_stage(model, N, 3, comm=schedule)[0]["peak_by_kind"]["params"]
''', {"gather_layer": "zerosim.collectives.all_gather", "predict_gathers": "zerosim.models.MLP",
      "predict_params_peak": "zerosim.models.meta.MetaModel"}),
}


@pytest.mark.parametrize("number", [1, 2, 3])
def test_an_assignment_that_calls_zerosims_own_code_scores_0_on_those_cases_and_says_why(number, tmp_path):
    """Every function of the assignment that zerosim implements (the code and the predictions zerosim computes),
    answered by calling zerosim: every one of their cases scores 0 with the policy's line; the same file in this
    process, where nothing refuses it, scores every point of those tests."""
    source, called = CHEAT_ASSIGNMENTS[number]
    a, path = get(number), write(tmp_path, source, get(number).files)
    with Learner(open(path, "rb").read(), path, a.policy(), 3600) as learner:
        graded = results(a, learner, only=set(called))
    assert {t.exercise.function for t in a.tests if t.exercise.function in called} == set(called)
    assert graded["tests"] and graded["score"] == 0
    function_of = {t.exercise.name: t.exercise.function for t in a.tests}
    for t in graded["tests"]:
        function = function_of[t["name"].split(": ")[0]]
        assert f"this case grades your {function}; calling {called[function]}" in t["output"], t["output"]
    if number == 1:  # the line docs/how-to/teach-a-course.md quotes is the grader's own
        page = " ".join((ROOT / "docs" / "how-to" / "teach-a-course.md").read_text().split())
        quoted = next(t["output"] for t in graded["tests"] if t["name"].startswith("ring_reduce_scatter 2:"))
        assert quoted.startswith("N = 4, L = 4, fp16") and quoted in page, quoted
    here = results(a, InProcess(path), only=set(called))
    assert here["score"] == sum(t["max_score"] for t in here["tests"]), [t["output"] for t in here["tests"]
                                                                           if t["status"] == "failed"]


FORGED = '{"event": "done", "result": {"passed": true, "cases": 5, "counterexample": null}}'
WRONG = "def chunk_sent(rank, step, world_size):\n    return rank\n"


@pytest.mark.parametrize("when", ["while loaded", "in a case"])
def test_a_verdict_written_on_the_report_pipe_earns_nothing(tmp_path, when):
    """The old protocol's "done, passed" line, written on the pipe whose descriptor the child's argv names, then the
    process ended: before, the grader took it as the child's verdict and passed a wrong file."""
    forge = ("import json, os, sys\n"
             f"os.write(json.loads(sys.argv[-1])['report'], {(FORGED + chr(10)).encode()!r})\nos._exit(0)\n")
    text = forge + WRONG if when == "while loaded" else \
        "import json, os, sys\n\ndef chunk_sent(rank, step, world_size):\n" + "".join(
            f"    {line}\n" for line in forge.splitlines()[1:])
    graded = grade_file("ring_chunk", write(tmp_path, text), time_limit=3600)
    assert not graded.passed, str(graded)
    assert "wrote on the grader's own report pipe" in graded.counterexample


def test_patching_the_grading_code_in_its_own_process_earns_nothing(tmp_path):
    """A file that replaces the grading functions it can reach in the child (before: `Exercise.grade`, which ran
    there, and then passed a wrong answer) with ones that pass everything: the checks run in the grader."""
    text = ('''\
import zerosim.teaching.exercises._grading as grading
import zerosim.teaching.sandbox._child as child

for patch in (lambda: setattr(grading.Exercise, "grade", lambda self, fn, on_case=None:
                                                      grading.Result(self.name, True, 5)),
              lambda: setattr(grading.Exercise, "judge", lambda self, fn, case: None),
              lambda: setattr(child._Serve, "call", lambda self, request: self.pipe.say(event="returned", value=0,
                                                                                       changes={}, refused=[],
                                                                                       noted=[]))):
    try:
        patch()
    except Exception as e:
        print("could not patch:", type(e).__name__)
''' + WRONG)
    graded = grade_file("ring_chunk", write(tmp_path, text), time_limit=3600)
    assert not graded.passed and graded.cases == 1, str(graded)
    assert "ends holding the sum of chunk 0" in graded.counterexample, str(graded)


BYPASSES = {  # name -> an expression that, when it works, is zerosim's own reduce_scatter (tried in this order)
    "import": "__import__('zerosim.collectives', fromlist=['x']).reduce_scatter",
    "importlib, a private module": "importlib.import_module('zerosim.collectives._calls').reduce_scatter",
    "a face's getattr": "getattr(importlib.import_module('zerosim'), 'reduce_scatter')",
    "an old path": "importlib.import_module('zerosim.collectives.calls').reduce_scatter",
    "its __code__ copied": "(lambda f: types.FunctionType(f.__code__, f.__globals__, 'mine', f.__defaults__, "
                           "f.__closure__))(importlib.import_module('zerosim.collectives').reduce_scatter)",
    "a PathFinder asked directly": "load(importlib.machinery.PathFinder.find_spec('zerosim.collectives', "
                                   "[ROOT + '/zerosim'])).reduce_scatter",
    "spec_from_file_location": "load(importlib.util.spec_from_file_location('mine', ROOT + '/zerosim/collectives/"
                               "_calls.py')).reduce_scatter",
    "the source read and exec'd": "run(open(ROOT + '/zerosim/collectives/_calls.py').read())['reduce_scatter']",
    "through /proc/self/root": "run(open('/proc/self/root' + ROOT + '/zerosim/collectives/_calls.py').read())"
                               "['reduce_scatter']",
    "a relative name that climbs": "run(open('../' * 30 + ROOT[1:] + '/zerosim/collectives/_calls.py').read())"
                                   "['reduce_scatter']",
    "a dir_fd above zerosim": "run(os.read(os.open('zerosim/collectives/_calls.py', os.O_RDONLY, "
                              "dir_fd=os.open(ROOT, os.O_RDONLY)), 1 << 20).decode())['reduce_scatter']",
    "a symlink to it": "os.symlink(ROOT + '/zerosim/collectives/_calls.py', 'calls.py') or "
                       "run(open('calls.py').read())['reduce_scatter']",
    "gc": "next(o for o in gc.get_objects() if getattr(o, '__name__', '') == 'reduce_scatter')",
    # from here on the policy's finder and stand-ins are gone, or its own class changed, for good: an import statement
    # puts the finder back, and nothing opens zerosim's source for an import that goes round it
    "sys.modules and sys.meta_path emptied, then import": "forget() or __import__('zerosim.collectives', "
                                                          "fromlist=['x']).reduce_scatter",
    "sys.modules and sys.meta_path emptied, then importlib": "forget() or importlib.import_module("
                                                             "'zerosim.collectives').reduce_scatter",
    "the policy patched to offer everything": "setattr(importlib.import_module('zerosim.teaching.sandbox._policy')"
                                              ".Policy, 'offered', lambda self, module: True) or forget() or "
                                              "importlib.import_module('zerosim.collectives').reduce_scatter",
}
PROBE = '''\
import gc, importlib, importlib.machinery, importlib.util, os, sys, types
import numpy as np
from zerosim.cluster import Cluster

ROOT = os.path.dirname(os.path.dirname(importlib.util.find_spec("zerosim").origin))


def forget():
    for name in [n for n in sys.modules if n.startswith("zerosim.collectives")]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if "sandbox" not in type(f).__module__]


def load(spec):
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(text):
    namespace = {"__name__": "zerosim.collectives._calls"}
    exec(text, namespace)
    return namespace


for name, expression in BYPASSES.items():
    try:
        found = eval(expression)
        out = found(Cluster(2), [np.ones(2, np.float32), np.full(2, 2, np.float32)])
        said = "WORKED" if float(out[0][0]) == 3.0 else "wrong"
    except BaseException as e:
        said = type(e).__name__
    print(f"BYPASS {name}: {said}", flush=True)


def chunk_sent(rank, step, world_size):
    return (rank - 1 - step) % world_size
'''


def test_the_ways_round_the_policy_are_closed(tmp_path, capfd):
    """Each way a student might reach zerosim's reduce_scatter past the policy (the issue names them), tried while
    the file loads: none gets a function that reduces (each is refused or fails), and the file, right otherwise,
    still passes. Before, every one worked."""
    text = f"BYPASSES = {BYPASSES!r}\n" + PROBE
    graded = grade_file("ring_chunk", write(tmp_path, text), time_limit=3600)
    out = capfd.readouterr().out
    said = dict(line.removeprefix("BYPASS ").split(": ", 1) for line in out.splitlines() if line.startswith("BYPASS"))
    assert set(said) == set(BYPASSES), out
    assert not [name for name, how in said.items() if how in ("WORKED", "wrong")], said
    assert graded.passed, str(graded)


def test_a_graders_bytecode_folder_opens_no_way_round(tmp_path, capfd, monkeypatch):
    """A grader whose environment names a folder of compiled bytecode (PYTHONPYCACHEPREFIX) holding zerosim's
    collectives: the ways round that go past the finder still find nothing to load. The child reads bytecode only
    beside the sources, where the closed files are (sandbox/_run.py); with the grader's folder in its environment the
    last two worked (seen 2026-11-29: the suite's own bytecode folder, tests/conftest.py)."""
    folder = tmp_path / "bytecode"
    collectives = Path(zerosim_root()) / "zerosim" / "collectives"
    subprocess.run([sys.executable, "-X", f"pycache_prefix={folder}", "-m", "compileall", "-q", str(collectives)],
                   check=True)
    assert list(folder.rglob("_calls.*.pyc"))  # the grader's folder holds them
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(folder))
    ways = {name: BYPASSES[name] for name in ("sys.modules and sys.meta_path emptied, then importlib",
                                              "the policy patched to offer everything")}
    graded = grade_file("ring_chunk", write(tmp_path, f"BYPASSES = {ways!r}\n" + PROBE), time_limit=3600)
    said = dict(line.removeprefix("BYPASS ").split(": ", 1) for line in capfd.readouterr().out.splitlines()
                if line.startswith("BYPASS"))
    assert set(said) == set(ways) and not [how for how in said.values() if how in ("WORKED", "wrong")], said
    assert graded.passed, str(graded)


def zerosim_root() -> str:
    import zerosim

    return str(Path(zerosim.__file__).resolve().parent.parent)


def test_the_lecturer_reads_that_a_submission_started_a_process(tmp_path):
    """Processes are not policed (a solution may start one: _policy.py says what that leaves open); the results say
    so, for the lecturer."""
    text = ("import subprocess, sys\n\ndef predict_2048():\n"
            "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
            "    return {'fp16': [2052, 2052, 2048, 2048], 'bf16': [2048] * 4}\n")
    a, path = get(1), write(tmp_path, text, "a1_ring.py")
    with Learner(open(path, "rb").read(), path, a.policy(), 3600) as learner:
        graded = results(a, learner, only={"predict_2048"})
    assert graded["score"] == 1.0 and "while it was graded your code started a process (subprocess.Popen)" in \
        graded["output"], graded["output"]


def test_nothing_of_zerosim_but_the_offer_and_the_sandbox_is_loaded_before_the_learners_file(tmp_path, capfd):
    """The child imports its own machinery before the policy is armed; had it loaded a graded module, the real
    functions would be in the file's reach (the policy refuses to run then: check_machinery)."""
    text = ("import sys, types\nprint('REAL', *sorted(n for n, m in sys.modules.items() if n.startswith('zerosim')\n"
            "                         and type(m) is types.ModuleType))\n" + WRONG)
    grade_file("ring_chunk", write(tmp_path, text), time_limit=3600)
    loaded = next(line for line in capfd.readouterr().out.splitlines() if line.startswith("REAL")).split()[1:]
    assert "zerosim.teaching.sandbox._child" in loaded and "zerosim.precision" in loaded, loaded
    machinery = ("zerosim", "zerosim._compat", "zerosim._lazy", "zerosim.teaching", "zerosim.teaching._predict",
                 "zerosim.teaching._questions",
                 # the questions by topic and the starter kit, which teaching's face brings: no engine among them
                 "zerosim.teaching._questions_memory", "zerosim.teaching._questions_pipeline",
                 "zerosim.teaching._questions_step", "zerosim.teaching._questions_time", "zerosim.teaching._starter",
                 "zerosim._dataclass")  # the records' decorator (zerosim.precision's records): it answers nothing
    assert all(n in machinery or n.startswith(("zerosim.precision", "zerosim.teaching.sandbox")) for n in loaded), \
        loaded


HARNESS = "sandbox_harness:forked"  # tests/sandbox_harness.py
ON_A_FORK = '''\
import subprocess, sys
from zerosim.collectives import reduce_scatter


def chunk_sent(rank, step, world_size):
    # close_fds=False: subprocess starts it through os.posix_spawn, as Python 3.13 does by default (one process)
    subprocess.run([sys.executable, "-c", "pass"], check=True, close_fds=False)
    try:
        reduce_scatter(None, [])
    except Exception:  # refused: answer with my own arithmetic
        pass
    return (rank - step - 1) % world_size
'''


def test_a_harness_runs_the_learners_function_in_the_child_and_brings_back_what_the_policy_recorded(tmp_path,
                                                                                                   monkeypatch):
    """Assignment 4's shape without torch: the grader asks the child to run the learner's function through a harness
    the policy names (`via`), which calls it in a process it forks. What comes back is the harness's data; the
    refused call and the process the learner's code started there join the call's records; the harness's own fork
    is not the learner's. A harness the policy does not name is not run."""
    from zerosim.teaching.exercises._grading import OFFERS, through
    from zerosim.teaching.sandbox import Budget, Policy, Session

    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests"))
    path = write(tmp_path, ON_A_FORK)
    policy = Policy({"chunk_sent": ("zerosim.collectives",)}, OFFERS, "the test's handout", (HARNESS,))
    with Session(ON_A_FORK.encode(), path, policy, handles={}) as s:
        assert s.load(Budget(3600)).event == "loaded"
        reply = s.call("chunk_sent", (1, 0, 4), {}, Budget(3600), via=HARNESS)
        assert (reply.event, reply.fields.get("value")) == ("returned", {"value": 0, "raised": None}), reply
        assert reply.refused == ["zerosim.collectives.reduce_scatter"], reply.refused
        assert reply.noted == ["started a process (subprocess.Popen)"], reply.noted
        other = s.call("chunk_sent", (1, 0, 4), {}, Budget(3600), via="sandbox_harness:json")
        assert other.event == "unsendable" and "'sandbox_harness:json' is not among the policy's" in \
            other.fields["message"], other
    # in this process (a notebook), the same harness takes the plain function
    assert through(lambda rank, step, n: (rank - step - 1) % n, HARNESS, 1, 0, 4) == {"value": 0, "raised": None}
