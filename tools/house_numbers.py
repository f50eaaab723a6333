"""The house in numbers: how the package is laid out, for a before/after of a reorganisation (issue 34).

    python tools/house_numbers.py [ROOT]        # ROOT: a checkout (default: this one)

files per folder, files over 300 lines, functions over 60 lines, import circles between folders, and the imports
that reach past a package's face from what users read (README, docs, notebooks, course, the CLI): an import of a
module that is not a package (`from zerosim.zero.plan import ...`) or of a private one (`zerosim.x._y`).
"""

from __future__ import annotations

import ast
import collections
import json
import re
import sys
from pathlib import Path


def python_files(root: Path) -> list:
    return sorted(p for p in (root / "zerosim").rglob("*.py") if "__pycache__" not in p.parts)


def module_of(root: Path, path: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def long_functions(tree) -> list:
    return [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > 60]


def circles(graph: dict) -> list:
    """Strongly connected components of more than one folder (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def user_sources(root: Path) -> list:
    out = []
    for pattern in ("README.md", "docs/**/*.md", "course/**/*.md", "course/**/*.py", "notebooks/*.ipynb",
                    "zerosim/cli/*.py"):
        for p in root.glob(pattern):
            text = p.read_text(encoding="utf-8")
            if p.suffix == ".ipynb":
                out += ["".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "code"]
            elif p.suffix == ".md":
                out += re.findall(r"```python\n(.*?)```", text, re.S)
            else:
                out.append(text)
    return out


PUBLIC = ("zerosim.progress", "zerosim.outputs", "zerosim.cli.")  # one-file faces: progress bars, output paths; the CLI


def past_faces(root: Path, sources: list) -> int:
    packages = {module_of(root, p) for p in python_files(root) if p.name == "__init__.py"}
    count = 0
    for src in sources:
        src = "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for n in ast.walk(tree):
            mods = [n.module] if isinstance(n, ast.ImportFrom) and n.module else []
            mods += [a.name for a in n.names] if isinstance(n, ast.Import) else []
            count += sum(m.startswith("zerosim.") and (m not in packages or "._" in m) and not m.startswith(PUBLIC)
                         for m in mods)
    return count


def main(root: Path) -> dict:
    files = python_files(root)
    per_folder = collections.Counter(p.parent.relative_to(root).as_posix() for p in files)
    lines = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in files}
    graph = collections.defaultdict(set)
    long_fns = 0
    for p in files:
        tree = ast.parse(p.read_text(encoding="utf-8"))
        long_fns += len(long_functions(tree))
        here = p.parent.relative_to(root).as_posix().replace("/", ".")
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("zerosim"):
                target = n.module.split(".")
                folder = ".".join(t for t in target if not t.startswith("_"))
                while folder and not (root / folder.replace(".", "/")).is_dir():
                    folder = folder.rpartition(".")[0]
                nested = here.startswith(folder + ".") or folder.startswith(here + ".")  # a package and its own folders
                if folder and folder != here and not nested:
                    graph[here].add(folder)
    return {
        "python files": len(files),
        "lines": sum(lines.values()),
        "folders": len(per_folder),
        "most files in one folder": per_folder.most_common(3),
        "files over 300 lines": sorted((p.relative_to(root).as_posix(), n) for p, n in lines.items() if n > 300),
        "functions over 60 lines": long_fns,
        "import circles between folders": circles(dict(graph)),
        "imports past a face in README, docs, notebooks, course, CLI": past_faces(root, user_sources(root)),
    }


if __name__ == "__main__":
    result = main(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
    for k, v in result.items():
        print(f"{k}: {v}")
