"""Bring Python lines over 120 columns under it, changing no behaviour: every file's syntax tree stays the same.

    python tools/wrap_long_lines.py zerosim tests benchmarks      # then read what it could not do

Three passes, each on the lines `ruff check --select E501` reports:

1. a trailing comment that makes a line too long moves onto its own line(s) above the code, at the code's
   indent (a comment line is re-wrapped); `# noqa` and `# type:` comments stay where they are;
2. a one-line string literal inside brackets is cut at a space, outside any f-string field, into two
   adjacent literals — Python joins them back into the same value;
3. a code line is re-formatted by `ruff format --range` (that statement only; never a line inside a multi-line
   string, whose docstring ruff would re-indent).

A file whose syntax tree (docstrings aside, compared with their whitespace collapsed) would change is left
as it was and named. Docstring lines and other long strings are listed for a hand.
"""

from __future__ import annotations

import ast
import io
import json
import subprocess
import sys
import textwrap
import tokenize

WIDTH = 120


def ruff(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], capture_output=True, text=True)


def long_lines(paths) -> dict:
    """{file: [rows]} of every line over WIDTH."""
    out = ruff("check", "--select", "E501", "--line-length", str(WIDTH), "--output-format", "json", "--no-cache",
               "--exit-zero", *paths).stdout
    found = {}
    for d in json.loads(out or "[]"):
        found.setdefault(d["filename"], []).append(d["location"]["row"])
    return found


def tree(source: str) -> str:
    """The syntax tree as text, docstrings with their whitespace collapsed."""
    module = ast.parse(source)
    for node in ast.walk(module):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                first.value.value = " ".join(first.value.value.split())
    return ast.dump(module)


def wrap_comment(indent: str, comment: str) -> list:
    width = WIDTH - len(indent) - 2
    return [f"{indent}# {part}" for part in textwrap.wrap(comment[1:].strip(), width, break_long_words=False,
                                                         break_on_hyphens=False)]


def move_comments(source: str, rows: list) -> str:
    lines = source.split("\n")
    found = {tok.start[0]: (tok.start[1], tok.string)
             for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    for row in sorted(set(rows), reverse=True):
        if row not in found:
            continue
        col, comment = found[row]
        text = lines[row - 1]
        indent = text[: len(text) - len(text.lstrip())]
        if "noqa" in comment or "type:" in comment or "pragma" in comment:
            continue
        if col == len(indent):  # a comment line: re-wrapped
            lines[row - 1 : row] = wrap_comment(indent, comment)
        elif len(text[:col].rstrip()) <= WIDTH:  # a trailing comment: above the code
            lines[row - 1 : row] = wrap_comment(indent, comment) + [text[:col].rstrip()]
    return "\n".join(lines)


def _cut(body: str, limit: int, is_f: bool) -> int | None:
    depth, best = 0, None
    for i, ch in enumerate(body):
        depth += (ch == "{") - (ch == "}") if is_f else 0
        if ch == " " and depth == 0 and 10 < i + 1 <= limit:
            best = i + 1
    return best


def split_strings(source: str, rows: list) -> str:
    lines = source.split("\n")
    depth, strings = 0, {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        elif tok.type == tokenize.STRING and tok.start[0] == tok.end[0] and depth > 0 and tok.end[1] > WIDTH:
            strings.setdefault(tok.start[0], []).append(tok)
    for row in sorted(set(rows) & set(strings), reverse=True):
        tok = max(strings[row], key=lambda t: t.start[1])
        text, col, line = tok.string, tok.start[1], lines[row - 1]
        q = next(i for i, ch in enumerate(text) if ch in "\"'")
        prefix, quote = text[:q], text[q]
        if text[q : q + 3] in ('"""', "'''"):
            continue
        body = text[q + 1 : -1]
        is_f = "f" in prefix.lower()
        cut = _cut(body, WIDTH - col - len(prefix) - 2, is_f)
        if cut is None or cut >= len(body):
            continue
        parts = []
        for part in (body[:cut], body[cut:]):
            p = prefix if not is_f or "{" in part else prefix.replace("f", "").replace("F", "")
            parts.append(f"{p}{quote}{part}{quote}")
        lines[row - 1 : row] = [line[:col] + parts[0], " " * col + parts[1] + line[tok.end[1]:]]
    return "\n".join(lines)


def in_long_strings(source: str) -> set:
    """Lines inside a string that spans several lines (a docstring, a text block)."""
    return {row for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.STRING and tok.end[0] > tok.start[0] for row in range(tok.start[0], tok.end[0] + 1)}


def main(paths: list) -> int:
    before = {}
    for _ in range(2):  # a statement ruff re-formats may leave a string or comment to move on the next round
        for _ in range(3):  # comments and strings, until nothing more moves
            for path, rows in long_lines(paths).items():
                source = open(path).read()
                before.setdefault(path, source)
                open(path, "w").write(split_strings(move_comments(source, rows), rows))
        for path, rows in long_lines(paths).items():  # code: ruff format, statement by statement
            before.setdefault(path, open(path).read())
            inside = in_long_strings(open(path).read())
            for row in sorted(set(rows) - inside, reverse=True):
                ruff("format", "--line-length", str(WIDTH), "--range", f"{row}:1-{row + 1}:1", "--no-cache", path)
    changed = 0
    for path, source in before.items():
        new = open(path).read()
        if new != source and tree(new) != tree(source):
            open(path, "w").write(source)
            print(f"{path}: left as it was (its syntax tree would change)")
        changed += new != source
    left = long_lines(paths)
    for path, rows in sorted(left.items()):
        for row in rows:
            print(f"{path}:{row}: still {len(open(path).read().split(chr(10))[row - 1])} columns")
    print(f"{changed} files changed; {sum(len(r) for r in left.values())} lines left for a hand")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["zerosim", "tests", "benchmarks"]))
