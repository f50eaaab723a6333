"""Faces that import each name the first time it is asked for (PEP 562), so that `from zerosim import ZeroEngine`
loads what the engine needs and no more (benchmarks/imports.py; tests/test_import_graph.py counts the modules).

    _NAMES = {"._model": ("Model", "ParamSpec"), ".mlp": ("MLP", "TinyNet")}   # module (relative) -> its names
    __getattr__, __dir__ = lazy_face(__name__, _NAMES)
    __all__ = sorted(names_of(_NAMES))

A name is imported from its module on first use and kept in the face's namespace (the next lookup is plain); a
subpackage or module of the face (`zerosim.models.gpt`) is imported when first asked for as an attribute, as an
eager face's imports used to make it. Anything else is the usual AttributeError.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys


def names_of(table: dict) -> list:
    """Every name a face's table lists."""
    return [name for names in table.values() for name in names]


def _is_module(dotted: str) -> bool:
    """True where `dotted` names a module or package that can be imported (a stand-in for an old path, which has no
    spec, zerosim/_compat.py, is not one)."""
    if dotted.rsplit(".", 1)[-1].startswith("__"):
        return False
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


def lazy_face(package: str, table: dict) -> tuple:
    """(__getattr__, __dir__) for the face module `package`, whose names come from `table` (module -> names)."""
    homes = {name: module for module, names in table.items() for name in names}

    def __getattr__(name: str):
        module = sys.modules[package]
        if name in homes:
            value = getattr(importlib.import_module(homes[name], package), name)
        elif _is_module(f"{package}.{name}"):
            value = importlib.import_module(f"{package}.{name}")  # a subpackage or module of the face
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(module, name, value)
        return value

    def __dir__() -> list:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return __getattr__, __dir__
