"""What a solution may import and call: the handout's offer, never zerosim's own implementation of what is graded.

    policy = Policy(grades={"ring_reduce_scatter": ("zerosim.collectives",)}, offers=("zerosim.precision",))
    arm(policy)        # in the child, after its own imports and before the learner's file is loaded (_child.py)

Why. The package a student has installed holds the answer to every case: an assignment-1 file that called
`zerosim.collectives.reduce_scatter` and `tree_all_reduce` scored full marks. Each exercise and assignment declares, as
data, what it grades (`grades`: for each function the learner writes, the zerosim modules whose code would answer
its cases) and what its handout offers (`offers`: casts and formats, the cluster). In the child, zerosim's modules
are then of three kinds, the longest matching prefix deciding (a graded prefix wins a tie):

- offered: imported and run for real;
- graded, or merely not offered: never loaded. Importing one succeeds (a top-level `from zerosim.collectives import
  reduce_scatter` does not stop the file from loading) and gives a stand-in module whose every name is a `Refuser`;
  calling one raises `Refused` with a line saying why ("this case grades your ring_reduce_scatter; calling
  zerosim.collectives.reduce_scatter, zerosim's own implementation of it, is not allowed here") and is recorded, so
  that the case fails even where the learner's code catches the error (`refused()`; the grader reads the record
  with the call's answer).

The harness that checks a case runs in the grader (_run.py), not in the child: the child needs nothing of zerosim
beyond the sandbox's own modules, loaded before `arm` (MACHINERY; `check_machinery` refuses to run the learner's code
if anything else of zerosim was loaded by then). So zerosim's graded functions never exist in the child's memory:
there is no function object whose `__code__` could be copied, no module to find in `sys.modules` or through a face's
`getattr`, nothing for `gc` to find.

One exception, named in the policy: a *harness* (`harnesses`, "module:function") that a learner's function must run
inside, because what it is given cannot cross the pipe (assignment 4's: torch tensors, on N forked gloo processes,
zerosim/teaching/_gloo_ranks.py). The child imports each before `arm`, as machinery, and runs the learner's function
through it when the grader asks; it returns plain data, which the grader judges. A harness module imports nothing of
zerosim beyond MACHINERY at its top (`check_machinery` holds it to that too), so it brings no graded code into reach.
It runs beside the learner's code, so the learner's code can change what it does: what it reports is a claim, like a
returned value (docs/how-to/teach-a-course.md says what that leaves open). The processes it starts are its own, not
the learner's (`own_processes`); what the learner's code did in them (a refused call, a process started) it brings
back (`records`, `merge`).

The ways round it a student could try, and what closes each:

- `import`, `importlib.import_module`, `__import__`, `from zerosim.collectives._ring import ...`, a face's
  `getattr(zerosim, "reduce_scatter")`, an old path (`zerosim/_compat.py`'s MOVED): all go through the import system,
  whose first finder (`sys.meta_path[0]`) is the policy's; a stand-in comes back.
- Removing that finder, or the stand-ins from `sys.modules`: an audit hook (PEP 578; `sys.addaudithook`, which
  nothing can remove) puts the finder back in front at every import statement (CPython raises its "import" event
  there, not in `importlib.import_module`); an import that goes round it meets the next guard.
- Loading zerosim's source past the import system (`importlib.util.spec_from_file_location`, a `PathFinder` asked
  directly, `open(...).read()` then `exec`, `runpy`, `inspect.getsource`, a `.pyc` from `__pycache__`): every one
  opens the file, and the audit hook refuses to open the source or bytecode of a module that is not offered, the
  folders of those packages and every folder above zerosim's (a `dir_fd` from which to open them by a relative
  name), a relative name that climbs (`..`), and making links (a path that would lead there under another name).
  Files are told apart by device and inode, so no spelling of a path (symlinks, /proc/self/root/...) gets through.
  Compiled bytecode is read only beside the sources (the child's environment has no PYTHONPYCACHEPREFIX: _run.py),
  where the closed files are: a grader whose environment set one let a solution load zerosim's compiled modules from
  that folder, past the finder, until 2026-11-29.
- Finding the hook to change it: `gc.get_objects`, `gc.get_referrers` and `gc.get_referents` are refused; what the
  hook reads is held in its default arguments, and the builtins it calls were bound when it was made.

What it does not close, said plainly (docs/how-to/teach-a-course.md repeats it for lecturers): a solution can start
another process (`subprocess`, `os.system`) or call C through `ctypes`; neither is policed, so either can run or read
zerosim's code. A solution can set `sys.pycache_prefix` itself, to a folder of zerosim's compiled bytecode that
exists elsewhere on the machine. And a student can copy zerosim's source text into their file: the package is open
source. Those are deliberate acts, visible in the file, like copying a classmate's; the course's academic-honesty
policy covers them, and the grader's record (`noted()`: the processes a solution started) is in its feedback for the
lecturer to read.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import stat as _stat
import sys
import types
from dataclasses import dataclass, field

# zerosim's modules the child itself imports before arming (_child.py and what it needs): loaded for real, and left so.
# The teaching package's own face brings the questions and the starter kit: each imports nothing of zerosim at its
# top beyond _predict, so what their functions compute still passes the policy when called
MACHINERY = ("zerosim", "zerosim._compat", "zerosim._lazy", "zerosim.teaching", "zerosim.teaching._predict",
             "zerosim.teaching._questions", "zerosim.teaching._questions_memory",
             "zerosim.teaching._questions_pipeline", "zerosim.teaching._questions_step",
             "zerosim.teaching._questions_time", "zerosim.teaching._starter", "zerosim.teaching.sandbox",
             "zerosim.precision", "zerosim._dataclass")  # the last: the records' decorator, which answers nothing


@dataclass(frozen=True)
class Policy:
    """What a solution may use. `grades`: {function: zerosim module prefixes whose code answers its cases};
    `offers`: the prefixes the handout gives (loaded for real). Every other zerosim module is refused."""

    grades: dict = field(default_factory=dict)
    offers: tuple = ()
    handout: str = "the handout"  # what offers them, in words ("assignment 1's handout")
    harnesses: tuple = ()  # "module:function" the grader may ask the child to run a learner's function through

    def to_plan(self) -> dict:
        return {"grades": {f: list(p) for f, p in self.grades.items()}, "offers": list(self.offers),
                "handout": self.handout, "harnesses": list(self.harnesses)}

    @classmethod
    def from_plan(cls, plan: dict) -> Policy:
        return cls({f: tuple(p) for f, p in plan["grades"].items()}, tuple(plan["offers"]), plan["handout"],
                   tuple(plan["harnesses"]))

    def harness_modules(self) -> tuple:
        """The modules of `harnesses`, each once."""
        return tuple(dict.fromkeys(h.split(":", 1)[0] for h in self.harnesses))

    def offered(self, module: str) -> bool:
        """Whether the zerosim module called `module` runs for real (the longest matching prefix decides)."""
        best, kind = -1, False
        rules = [(p, True) for p in self.offers] + [(p, False) for ps in self.grades.values() for p in ps]
        for prefix, offer in rules:
            if module == prefix or module.startswith(prefix + "."):
                if len(prefix) > best or len(prefix) == best and not offer:
                    best, kind = len(prefix), offer
        return kind

    def refusal(self, function: str | None, name: str) -> str:
        """The line a refused call of zerosim's `name` gets while the learner's `function` runs (None: loading)."""
        offer = ", ".join(self.offers) or "nothing of zerosim"
        mine = self.grades.get(function, ())
        if any(name == p or name.startswith(p + ".") for p in mine):
            return (f"this case grades your {function}; calling {name}, zerosim's own implementation of what it "
                    f"grades, is not allowed here (the grader runs your file with what {self.handout} offers: "
                    f"{offer})")
        graded = sorted(f for f, ps in self.grades.items() if any(name == p or name.startswith(p + ".") for p in ps))
        why = (f"zerosim's own implementation of what your {', '.join(graded)} {'is' if len(graded) == 1 else 'are'} "
               "graded on" if graded else f"not among what {self.handout} offers ({offer})")
        during = f"this case grades your {function}" if function else "while your file was loaded"
        return f"{during}; calling {name} is not allowed here: it is {why}"


class Refused(Exception):
    """A call of zerosim's own code that the policy does not allow (the message says which, and why)."""


_STATE = {"policy": Policy(), "function": None, "refused": [], "noted": []}


def calling(function: str | None) -> None:
    """The serve loop says which of the learner's functions runs now (for the refusal's words); the records clear."""
    _STATE["function"] = function
    _STATE["refused"], _STATE["noted"], _STATE["popen"] = [], [], None


def refused() -> list:
    """The names of zerosim's code refused since `calling`, in order (a case with any fails)."""
    return list(_STATE["refused"])


def noted() -> list:
    """What the learner's code did that the lecturer should see (a process started), since `calling`."""
    return list(_STATE["noted"])


def records() -> tuple:
    """(refused(), noted()): what a process a harness started (a copy of this one, made by fork) sends back."""
    return refused(), noted()


def merge(refused_there: list, noted_there: list) -> None:
    """Add what the learner's code did in a process a harness started (its `records()`) to this process's records,
    each once: the call's reply carries them."""
    for mine, theirs in ((_STATE["refused"], refused_there), (_STATE["noted"], noted_there)):
        for n in map(str, theirs):
            if n not in mine:
                mine.append(n)


@contextlib.contextmanager
def own_processes():
    """The processes a harness starts in this block (its ranks) are its own, not the learner's: not noted."""
    before = len(_STATE["noted"])
    try:
        yield
    finally:
        del _STATE["noted"][before:]


class Refuser:
    """Stands for a name of zerosim that a solution may not use: calling it (or indexing, iterating, subclassing it)
    raises Refused; its attributes are refusers too (`zerosim.collectives.ShardLayout.real_bounds`)."""

    __slots__ = ("_name",)

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def _refuse(self, *args, **kwargs):
        name = object.__getattribute__(self, "_name")
        _STATE["refused"].append(name)
        raise Refused(_STATE["policy"].refusal(_STATE["function"], name))

    __call__ = __getitem__ = __iter__ = __len__ = __mro_entries__ = _refuse

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Refuser(f"{object.__getattribute__(self, '_name')}.{attr}")

    def __repr__(self) -> str:
        return f"<refused: {object.__getattribute__(self, '_name')}>"


class _StandIn(types.ModuleType):
    """A zerosim module that is not offered, never loaded: every public name a Refuser."""

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Refuser(f"{self.__name__}.{attr}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """sys.meta_path's first entry in the child: a stand-in for every zerosim module the policy does not offer."""

    def find_spec(self, name, path=None, target=None):
        if name.startswith("zerosim.") and not _STATE["policy"].offered(name):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        stand_in = _StandIn(spec.name)
        stand_in.__path__ = []  # a package: its submodules come here too
        return stand_in

    def exec_module(self, module) -> None:
        pass


def check_machinery(harnesses: tuple = ()) -> None:
    """Raise RuntimeError if a zerosim module outside MACHINERY, the sandbox and the policy's `harnesses` (modules)
    was loaded before arming: its real functions would be in the learner's reach."""
    extra = sorted(n for n, m in sys.modules.items() if n.startswith("zerosim.") and isinstance(m, types.ModuleType)
                   and type(m) is types.ModuleType and n not in MACHINERY and n not in harnesses
                   and not n.startswith(("zerosim.teaching.sandbox.", "zerosim.precision.")))
    if extra:
        raise RuntimeError(f"the grading process loaded {', '.join(extra[:5])} before the learner's file: it would "
                           "be in the file's reach")


def arm(policy: Policy) -> None:
    """Install `policy` in this process for good: the finder first on sys.meta_path, the audit hook (module
    docstring). Call once, after this process's own imports (the policy's harnesses included) and before any of the
    learner's code."""
    check_machinery(policy.harness_modules())
    _STATE["policy"] = policy
    finder = _Finder()
    sys.meta_path.insert(0, finder)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # zerosim's folder
    sys.addaudithook(_hook(policy, root, finder))


def _closed_paths(policy: Policy, root: str) -> frozenset:
    """(device, inode) of what a solution may not open: the source and bytecode of every zerosim module that is not
    offered or already loaded, its package folders, zerosim's folder and every folder above it."""
    loaded = {n for n, m in sys.modules.items() if type(m) is types.ModuleType}
    closed, parent = set(), os.path.dirname(root)
    while True:  # the folders above zerosim's: a dir_fd from which its files open by a relative name
        s = os.stat(parent)
        closed.add((s.st_dev, s.st_ino))
        if os.path.dirname(parent) == parent:
            break
        parent = os.path.dirname(parent)
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, os.path.dirname(root))
        package = rel.replace(os.sep, ".")
        cached = os.path.basename(folder) == "__pycache__"
        if cached:
            package = package.rsplit(".", 1)[0]
        package_closed = not cached and package not in loaded and not policy.offered(package) and package != "zerosim"
        if package_closed or package == "zerosim" and not cached:
            s = os.stat(folder)
            closed.add((s.st_dev, s.st_ino))
        for name in files:
            stem = name.split(".")[0]
            if not name.endswith((".py", ".pyc")):
                continue
            module = package if stem == "__init__" else f"{package}.{stem}"
            if module in loaded or module in ("zerosim", "zerosim._compat") or policy.offered(module):
                continue
            s = os.stat(os.path.join(folder, name))
            closed.add((s.st_dev, s.st_ino))
    return frozenset(closed)


def _hook(policy: Policy, root: str, finder):
    """The audit hook. Everything it reads is bound now, in its defaults: the closed (device, inode) pairs, os.stat,
    the finder; nothing in it looks up a name the learner's code could rebind."""
    _STATE["noted"], _STATE["popen"] = [], None  # popen: the last Popen noted, until its own spawn (hook)

    def hook(event, args, closed=_closed_paths(policy, root), stat=os.stat, isdir=_stat.S_ISDIR, finder=finder,
             state=_STATE, pathlike=(str, bytes, int), refused_events=("gc.get_objects", "gc.get_referrers",
                                                                        "gc.get_referents", "os.symlink", "os.link"),
             started=("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                      "os.forkpty")):
        if event == "open":
            path = args[0]
            if type(path) not in pathlike:
                raise PermissionError("the grader opens files named by a str, bytes or file descriptor only")
            if type(path) is not int:
                text = path.decode("utf-8", "replace") if type(path) is bytes else path
                if not text.startswith("/") and ".." in text.split("/"):
                    raise PermissionError(f"a solution may not open {text!r}: a relative name that climbs ('..')")
            try:
                s = stat(path)
            except (OSError, ValueError, TypeError):
                return
            if (s.st_dev, s.st_ino) in closed:
                what = "folder" if isdir(s.st_mode) else "source"
                raise PermissionError(f"a solution may not open {path!r}: it is zerosim's own {what}, which what "
                                      f"{state['policy'].handout} offers does not include")
        elif event == "import":
            meta_path = args[3]
            if isinstance(meta_path, list) and (not meta_path or meta_path[0] is not finder):
                if finder in meta_path:
                    meta_path.remove(finder)
                meta_path.insert(0, finder)
        elif event in refused_events:
            raise PermissionError(f"a solution may not call {event} in the grader")
        elif event in started:
            if event == "os.posix_spawn" and state.get("popen") == (args[0], args[1]):
                # the process the Popen just noted starts, with its executable and argv objects (Python 3.13.0,
                # Lib/subprocess.py `Popen._posix_spawn`; 3.13 takes that path by default): one process, one note
                state["popen"] = None
                return
            state["popen"] = (args[0], args[1]) if event == "subprocess.Popen" else None
            state["noted"].append(f"started a process ({event})")

    return hook
