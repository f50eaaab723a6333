"""Faces that import each name the first time it is asked for (PEP 562), so that `from zerosim import ZeroEngine`
loads what the engine needs and no more (benchmarks/imports.py; tests/test_import_graph.py counts the modules).

    _NAMES = {"._model": ("Model", "ParamSpec"), ".mlp": ("MLP", "TinyNet")}   # module (relative) -> its names
    __getattr__, __dir__ = lazy_face(__name__, _NAMES)
    __all__ = sorted(names_of(_NAMES))

A name is imported from its module on first use and kept in the face's namespace (the next lookup is plain); a
subpackage or module of the face (`zerosim.models.gpt`) is imported when first asked for as an attribute, as an
eager face's imports used to make it, and so is an old path while it still answers (one of MOVED's: the finder of
zerosim/_compat.py gives it a spec, so the import system itself decides, and the stand-in goes when the path does).
`dir()` lists the face's names and its public subpackages and modules. Anything else is the usual AttributeError.

Threads: a face hands out only whole modules (`_whole`), so the pool's workers (`Cluster(N, workers=k)`) may reach a
module's first import at once, through a face or around it, as plain imports may.
"""

from __future__ import annotations

import importlib
import sys


def names_of(table: dict) -> list:
    """Every name a face's table lists."""
    return [name for names in table.values() for name in names]


def _submodule(dotted: str):
    """The module `dotted` where the import system can import it: a module or package, or an old path that
    zerosim/_compat.py's finder still answers (a stand-in placed in sys.modules without a spec, SHADOWED's, is no
    module: a face's own function of that name answers first); else None. Imported at once, not looked for first:
    the path is searched once (a face's private modules are most of what it is asked for by the engine's imports)."""
    if dotted.rsplit(".", 1)[-1].startswith("__"):
        return None
    if dotted in sys.modules and getattr(sys.modules[dotted], "__spec__", None) is None:
        return None
    try:
        return _whole(dotted)
    except ModuleNotFoundError as e:
        if e.name != dotted:  # a module there, whose own import needs one that is missing: its error, as it is
            raise
        return None


def _whole(dotted: str):
    """The module `dotted`, whole: sys.modules' entry where its import has finished, else the import system's
    answer, which imports it here or waits for the thread that is importing it (the module's own import lock).

    Why not sys.modules' entry as it stands: the import system puts a module there before it runs the module's body,
    and `from face import _module` asks the face for `_module` before it imports anything (CPython's
    Lib/importlib/_bootstrap.py `_handle_fromlist`: `hasattr(module, x)`, as in 3.10 to 3.13). A face that answered
    from sys.modules handed a second thread a module another thread was still running, without waiting for its
    lock: the pool's workers (`Cluster(N, workers=k)`) failed a first fp32 step with "partially initialized module
    ... has no attribute 'rounded_by_norms'" in 5 fresh processes of 8 on two workers. A plain package (no
    `__getattr__`) never did, on any of Python 3.10 to 3.13, and the import's deadlock check was not involved. The
    thread that is itself importing the module (a cycle, in one thread) gets it half made, as a plain import does."""
    found = sys.modules.get(dotted)
    if found is None or getattr(getattr(found, "__spec__", None), "_initializing", False):
        return importlib.import_module(dotted)
    return found


def _absolute(module: str, package: str) -> str:
    """`module` of a face's table as an absolute name: ".x" is `package`.x, "..x" its parent's x (import's rule)."""
    level = len(module) - len(module.lstrip("."))
    if not level:
        return module
    base = package.rsplit(".", level - 1)[0]
    return f"{base}.{module[level:]}" if module[level:] else base


def lazy_face(package: str, table: dict) -> tuple:
    """(__getattr__, __dir__) for the face module `package`, whose names come from `table` (module -> names)."""
    homes = {name: _absolute(module, package) for module, names in table.items() for name in names}

    def __getattr__(name: str):
        module = sys.modules[package]
        if name in homes:
            value = getattr(_whole(homes[name]), name)  # imported already (most are, by the engine's own imports)
        else:
            value = _submodule(f"{package}.{name}")  # a subpackage or module, or an old path's stand-in
            if value is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(module, name, value)
        return value

    def __dir__() -> list:
        import pkgutil  # only when someone asks: dir() is for people and tab completion

        module = sys.modules[package]
        children = {m.name for m in pkgutil.iter_modules(module.__path__) if not m.name.startswith("_")}
        return sorted(set(vars(module)) | set(homes) | children)

    return __getattr__, __dir__
