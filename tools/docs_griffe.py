"""A griffe extension for the docs site (mkdocs.yml, mkdocstrings' `extensions:`): docstrings keep their indented
blocks.

zerosim's docstrings indent what is a listing (a face's files, one a line; a command's examples): Markdown shows
lines indented four spaces past the text as preformatted. `inspect.cleandoc`, which griffe applies, takes away the
indentation all lines after the first share, so a face whose every line below the title is indented (the listing
is its whole body) lost its listing to one run-on paragraph. Here a docstring is dedented by the indentation of its
own code block instead (0 for a module, the body's column for a class or function): what the source indents past
that stays indented.
"""

from __future__ import annotations

import ast

import griffe


def _dedented(raw: str, base: int) -> str:
    first, *rest = raw.expandtabs().split("\n")
    lines = [first.strip()] + [line[min(base, len(line) - len(line.lstrip())):].rstrip() for line in rest]
    return "\n".join(lines).strip("\n")


class IndentedBlocks(griffe.Extension):
    def on_instance(self, *, node, obj, agent, **kwargs) -> None:
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or not obj.docstring:
            return
        first = node.body[0] if node.body else None
        if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            return
        obj.docstring.value = _dedented(first.value.value, 0 if isinstance(node, ast.Module) else first.col_offset)


class LazyFaces(griffe.Extension):
    """A lazy face (zerosim/_lazy.py) imports each name the first time it is asked for, so its source holds no import
    of the names and an `__all__` computed from its table (`_NAMES`, or zerosim's own `_FACES`): griffe, reading the
    source, saw neither, and the face's API page lost its members. Here the table itself is read (a literal dict:
    module -> names) and each name becomes what an eager face's import made it, an alias exported by the face."""

    def on_module_members(self, *, node, mod, agent, **kwargs) -> None:
        table = _table(node)
        if table is None:
            return
        names = []
        for module, members in table.items():
            home = f"{mod.path}{module}" if module.startswith(".") else module  # ".x" is relative to the face
            for name in members:
                mod.set_member(name, griffe.Alias(name, f"{home}.{name}", parent=mod))
                names.append(name)
        listed = [c.value for c in ast.walk(_assigned(node, "__all__") or ast.Module(body=[], type_ignores=[]))
                  if isinstance(c, ast.Constant) and isinstance(c.value, str)]  # the eager names beside the table
        eager = {n for n in listed  # an eager import's alias, never a subpackage of the same name (precision's cast)
                 if n not in names and not isinstance(mod.members.get(n), (griffe.Module, type(None)))}
        mod.exports = sorted(set(names) | eager)


def _assigned(node, target: str):
    """The value a module's top level assigns to `target`, or None."""
    for stmt in getattr(node, "body", ()):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and getattr(stmt.targets[0], "id", None) == target:
            return stmt.value
    return None


def _table(node) -> dict | None:
    """The face's table of lazy names ({module: (names...)}) from its source, or None where it has none."""
    value = _assigned(node, "_NAMES") or _assigned(node, "_FACES")
    return None if value is None else ast.literal_eval(value)


class Dataclasses(griffe.Extension):
    """zerosim's records are made by zerosim/_dataclass.py's `dataclass`: the standard library's, with its methods
    made for less (the same fields, `__init__`, equality, hash, repr and frozen-ness). griffe knows a dataclass by its
    decorator's path, `dataclasses.dataclass`: it labels the class "dataclass" as it reads it, and writes its
    `__init__` signature from the fields once the package is read. Here a class decorated by zerosim's gets the same
    label, and a module's import of it is read as the standard library's, so a record's API page shows what it showed
    with the standard library's decorator."""

    def on_class_instance(self, *, node, cls, agent, **kwargs) -> None:
        if any(d.callable_path == OURS for d in cls.decorators):
            cls.labels.add("dataclass")

    def on_module_members(self, *, node, mod, agent, **kwargs) -> None:
        for name, path in list(mod.imports.items()):
            if path == OURS:  # the import, and the alias the decorator's name resolves through
                mod.imports[name] = "dataclasses.dataclass"
                mod.set_member(name, griffe.Alias(name, "dataclasses.dataclass", parent=mod))


OURS = "zerosim._dataclass.dataclass"
