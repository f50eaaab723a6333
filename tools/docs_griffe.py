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
