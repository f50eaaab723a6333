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
