"""A lazy face (zerosim/_lazy.py) hands every thread a whole module, never one another thread is still importing.

`from face import _module` asks the face for `_module` before it imports anything (CPython's importlib
`_handle_fromlist`), and the import system puts a module in sys.modules before running its body; a face that answered
from sys.modules gave the pool's workers (`Cluster(N, workers=k)`) half-made modules. Yardsticks: the module's own last
line (a name it defines at the end), and whether the thread that asked is done or waiting on the module's import lock
(read off its stack) at the moment the importing thread lets the module finish. No test here times anything: the
first tests order the two threads by events (their outcome does not depend on who runs first), and the fresh
processes' races pass on any schedule with the face waiting.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import threading
import types

import pytest
from helpers import HANG_TIMEOUT

_FACE = """
from zerosim._lazy import lazy_face

_NAMES = {"._slow": ("WHOLE",), "._outer": ("OUTER",)}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)
"""
# each module tells the test's gate it began, and ends only when the gate lets it
_SLOW = """
import sys
gate = sys.modules[__package__ + "_gate"]
gate.started.set()
gate.hold()
WHOLE = True
"""
# asks the face for a second module as it runs (the nested case), which asks the face for itself (a cycle in one
# thread: as a plain import, it gets itself half made, and no one waits)
_OUTER = """
import sys
gate = sys.modules[__package__ + "_gate"]
gate.started.set()
gate.hold()
from {package} import _inner
OUTER = _inner.INNER
"""
_INNER = """
from {package} import _inner as me
INNER = me.__spec__._initializing
"""


def _waiting_for_an_import(thread: threading.Thread) -> bool:
    """True while `thread` waits on a module's import lock: importlib's `_ModuleLock.acquire` is on its stack (the
    name CPython 3.10 to 3.13 give it; a release that renamed it would leave `hold` waiting, a hang, not a pass)."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == "acquire" and "importlib._bootstrap" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _face(tmp_path, monkeypatch, name: str):
    """A fresh lazy face `name` on sys.path (modules _slow, _outer, _inner) and its gate: `hold()` returns once the
    asking thread has its answer or waits on the module's import lock, whichever comes (only a hang waits longer)."""
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text(_FACE)
    for module, text in (("_slow", _SLOW), ("_outer", _OUTER), ("_inner", _INNER)):
        (package / f"{module}.py").write_text(text.format(package=name))
    monkeypatch.syspath_prepend(str(tmp_path))
    gate = types.ModuleType(f"{name}_gate")
    gate.started, gate.answered, gate.asker = threading.Event(), threading.Event(), None

    def hold():
        while not gate.answered.wait(0.001) and not (gate.asker and _waiting_for_an_import(gate.asker)):
            pass

    gate.hold = hold
    monkeypatch.setitem(sys.modules, gate.__name__, gate)
    for module in ("", "._slow", "._outer", "._inner"):  # none imported yet; whatever the test imports goes after it
        monkeypatch.setitem(sys.modules, name + module, None)
        del sys.modules[name + module]
    return gate


def _ask_while_another_imports(gate, name: str, module: str, ask) -> dict:
    """Thread 1 imports `name`.`module` (held in its body by the gate); once it began, thread 2 runs ask(name) and
    records what it got. Returns the second thread's answer."""
    got = {}

    def second():
        try:
            got["answer"] = ask(name)
        except AttributeError as e:  # a half-made module lacks the names its body has not reached
            got["answer"] = e
        gate.answered.set()

    first = threading.Thread(target=importlib.import_module, args=(f"{name}.{module}",))
    first.start()
    assert gate.started.wait(HANG_TIMEOUT)
    gate.asker = threading.Thread(target=second)
    gate.asker.start()
    for t in (gate.asker, first):
        t.join(HANG_TIMEOUT)
    return got


# what `from face import _slow` and `from face import WHOLE` do: the face is asked for the name before any import
_ROUTES = {"from face import _slow": lambda face: __import__(face, fromlist=["_slow"])._slow.WHOLE,
           "from face import WHOLE": lambda face: __import__(face, fromlist=["WHOLE"]).WHOLE}


@pytest.mark.parametrize("route", sorted(_ROUTES))
def test_a_second_thread_waits_for_the_module_another_is_importing(tmp_path, monkeypatch, route):
    """Thread 2 asks the face while thread 1 runs the module's body: by the module (`from face import _slow`: the
    face's submodule route, which gave the half-made module) or by a name it defines (`from face import WHOLE`).
    Thread 1 finishes the body only once thread 2 has its answer or waits on the import lock, so a face that answers
    without waiting is caught every time."""
    name = f"race_face_{sorted(_ROUTES).index(route)}"
    gate = _face(tmp_path, monkeypatch, name)
    assert _ask_while_another_imports(gate, name, "_slow", _ROUTES[route]) == {"answer": True}


def test_a_module_that_asks_the_face_as_it_runs_nests_and_a_cycle_in_one_thread_does_not_wait(tmp_path, monkeypatch):
    """The nested case: thread 2 waits for _outer, whose body (on thread 1) asks the same face for _inner, whose body
    asks the face for _inner itself. No lock of the face's own is held while a module runs, so nothing deadlocks;
    the cycle in one thread gets _inner half made (as `import` gives a cycle), and thread 2 the whole _outer."""
    name = "race_face_nested"
    gate = _face(tmp_path, monkeypatch, name)
    got = _ask_while_another_imports(gate, name, "_outer", 
                                     lambda face: __import__(face, fromlist=["_outer"])._outer.OUTER)
    assert got == {"answer": True}  # _inner saw itself still being imported: the one-thread cycle, not a wait


# k threads released at once, each taking one lazy import's first use in this fresh process; prints, per path, the
# threads that got a module without the name its body defines last
_FIRST_USES = """
import importlib, sys, threading
from zerosim import Cluster

k = int(sys.argv[1])
module = importlib.import_module
matmul = module("zerosim.precision.arithmetic._exact_matmul")
rounded = module("zerosim.precision.arithmetic._correctly_rounded")
arrays = module("zerosim.precision.cast._arrays")
staging = module("zerosim.collectives._staging")
kept = Cluster(2, keep_values=True)  # kept values: the collectives go hop by hop (_ring.py, imported on first use)
PATHS = {  # each path's first use, and the name its module defines last
    "norm bound": (lambda: matmul._norms(), "_own_norms"),
    "exact values": (lambda: rounded._exact_values(), "_power_settled"),
    "bf16 bits": (lambda: arrays._bf16_bits(), "_wide64"),
    "stand-in": (lambda: (arrays._StrictNumpy().zeros, sys.modules[arrays.__package__ + "._standin"])[1], "wrap"),
    "ring": (lambda: sys.modules[staging.phases(kept)[0].__module__], "_fifo"),
}
half = dict.fromkeys(PATHS, 0)

def first_use(path, barrier):
    use, last = PATHS[path]
    barrier.wait()
    try:
        whole = hasattr(use(), last)
    except AttributeError:  # a name the path reads off a half-made module
        whole = False
    half[path] += not whole

threads = []
for path in PATHS:
    barrier = threading.Barrier(k)
    threads += [threading.Thread(target=first_use, args=(path, barrier)) for _ in range(k)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(half)
"""


@pytest.mark.slow  # three fresh Python processes (~1 s each on a busy machine)
def test_each_lazy_import_a_workers_arithmetic_reaches_first_comes_whole_to_every_thread():
    """Every import a rank's work makes through a face on first use, taken by four threads at once: the norm bound
    (a first fp32 product), the exact values (a correctly rounded function's first suspect), the bf16 bit kernels and
    the stand-in (a device namespace's), the ring hop by hop (kept values). Without the face's wait each path handed
    some thread a half-made module in 4 to 10 of 10 fresh processes of two threads (the rate moves with the machine's
    load), and this test failed in 10 runs of 10; with it, no thread ever gets one, on any schedule."""
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", _FIRST_USES, "4"], capture_output=True, text=True,
                              timeout=HANG_TIMEOUT)
        assert done.returncode == 0, done.stderr[-600:]
        assert done.stdout.strip() == str(dict.fromkeys(["norm bound", "exact values", "bf16 bits", "stand-in",
                                                         "ring"], 0))


def test_an_array_met_while_the_stand_in_is_still_being_imported_is_not_taken_for_one(monkeypatch):
    """namespace_of reads the stand-in's module from sys.modules (no stand-in array exists before it is imported),
    where another thread may be running its body: before the class is defined there, no array is one of its
    instances, and the array is the host's (it raised AttributeError on the half-made module)."""
    from zerosim.precision.cast import NUMPY, namespace_of

    half = types.ModuleType("zerosim.precision.cast._standin")  # as sys.modules holds it before its body has run
    monkeypatch.setitem(sys.modules, half.__name__, half)
    assert namespace_of([1.0]) is NUMPY
