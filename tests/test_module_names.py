"""Every zerosim module a reader is pointed to exists under that name today: the layout moved every file into folders
by concept (issue 34), and a page that still says `cupy_nccl.py` sends a reader looking for a file that is gone.

    where        README.md, docs/, course/, benchmarks/README.md, every notebook cell, and every docstring and
                 comment under zerosim/ (zerosim/_compat.py names the old paths on purpose: left out)
    dotted       `zerosim.x.y` imports, or is an attribute of what imports; and is no old path of zerosim/_compat.py's
                 MOVED (SHADOWED ones are a face's own functions today: `zerosim.checkpoint.save`)
    paths        `zerosim/x/_y.py` (or a folder), and a path inside the package from one of its top folders
                 (`parallel/data/_engine.py`), exist
    bare names   the file name of an old path (the last part of a MOVED key: `cupy_nccl.py`, `budget.py`) is a stale
                 name — unless the sentence around it names whose file it is: FOREIGN lists the other projects' files
                 that share a name (or a path) with zerosim's, each with the words that name its owner
"""

import ast
import importlib
import io
import json
import re
import subprocess
import tokenize
import warnings
from pathlib import Path

import pytest

import zerosim
from zerosim import _compat

REPO = Path(zerosim.__file__).resolve().parent.parent
PACKAGE = REPO / "zerosim"
TOPS = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__"))
DOTTED = re.compile(r"(?<![\w/.-])zerosim(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w/.-])((?:zerosim|%s)/\w[\w./-]*\w/?)" % "|".join(TOPS))
BARE = re.compile(r"(?<![\w/.-])(\w+\.py)\b")
OLD_FILES = {old.rpartition(".")[2] + ".py" for old in _compat.MOVED}  # cupy_nccl.py, budget.py, ledger.py, ...

# Another project's file named like an old zerosim module (or a zerosim path): fine where its sentence names the owner.
FOREIGN = {
    "engine.py": ("DeepSpeed",),  # deepspeed/runtime/engine.py (and runtime/pipe/engine.py)
    "schedule.py": ("DeepSpeed",),  # deepspeed/runtime/pipe/schedule.py
    "muon.py": ("KellerJordan",),  # KellerJordan/Muon's muon.py, the reference Muon
    "configs.py": ("torchtitan",),  # torchtitan's pipeline-parallel config (its default schedule)
    "sgd.py": ("torch/optim",),  # torch/optim/sgd.py
    "a1_ring.py": ("assignment", "student"),  # a student's file for assignment 1 (zerosim assignment starter 1)
    "models/llama/modeling_llama.py": ("transformers",),  # Hugging Face transformers' Llama
    "models/llama/configuration_llama.py": ("transformers",),  # ... and its config
    "models/kimi_k2_7/config_registry.py": ("torchtitan",),  # torchtitan's Kimi K2 config
    "parallel/style.py": ("torch/distributed",),  # torch/distributed/tensor/parallel/style.py
}
BUILT = {"zerosim/teaching/notebooks"}  # made by setup.py's build step (a copy of notebooks/), in a wheel only


def _sentences(text: str) -> list:
    """(start, end) of each sentence of `text`: split at a sentence's end, a blank line, and around a table's row."""
    spans, at = [], 0
    for para in re.split(r"(\n\s*\n|\n(?=\s*\|)|(?<=\|)\n)", text):
        for m in re.finditer(r".+?(?:[.!?](?=\s)|$)", para, re.S):
            spans.append((at + m.start(), at + m.end()))
        at += len(para)
    return spans


def _foreign(name: str, sentence: str) -> bool:
    return any(word in sentence for word in FOREIGN.get(name, ()))


def _resolves(dotted: str) -> bool:
    """The longest prefix that imports, then attributes (a dataclass's field counts)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            fields = getattr(obj, "__dataclass_fields__", {})
            if name in fields and not hasattr(obj, name):
                obj = fields[name].type
                continue
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _old(dotted: str) -> bool:
    """A MOVED path, or a name under one — unless a face gives that name to one of its own (SHADOWED)."""
    parts = dotted.split(".")
    return any(".".join(parts[:i]) in _compat.MOVED and ".".join(parts[:i]) not in _compat.SHADOWED
               for i in range(2, len(parts) + 1))


def stale_names(text: str) -> list:
    """(kind, name) of every zerosim module `text` names that does not exist under that name today."""
    found = []
    for m in DOTTED.finditer(text):
        if _old(m.group()):
            found.append(("old path", m.group()))
        elif not _resolves(m.group()):
            found.append(("no such name", m.group()))
    for start, end in _sentences(text):
        sentence = text[start:end]
        for m in PATH.finditer(sentence):
            path = m.group(1).rstrip("/")
            inside = path.removeprefix("zerosim/")
            if (path.startswith("zerosim/") or path.endswith(".py")) and not (PACKAGE / inside).exists() \
                    and not _foreign(inside, sentence) and path not in BUILT:
                found.append(("no such file", path))
        for m in BARE.finditer(sentence):
            if m.group(1) in OLD_FILES and not _foreign(m.group(1), sentence):
                found.append(("old file name", m.group(1)))
    return found


def _prose_of_code(path: Path) -> str:
    """A module's docstrings and comments, each block apart (a blank line between): what a reader reads."""
    source = path.read_text(encoding="utf-8")
    blocks, comment, last = [], [], -2
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            if tok.start[0] != last + 1 and comment:
                blocks.append("\n".join(comment))
                comment = []
            comment.append(tok.string.lstrip("#").strip())
            last = tok.start[0]
    blocks += ["\n".join(comment)] if comment else []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            blocks += [doc] if doc else []
    return "\n\n".join(blocks)


def texts() -> dict:
    """{file: the text of it a reader reads}: see the module docstring."""
    listed = subprocess.run(["git", "ls-files", "README.md", "docs", "course", "benchmarks/README.md", "notebooks",
                             "zerosim"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    out = {}
    for name in listed:
        path = REPO / name
        if name.endswith(".md"):
            out[name] = path.read_text(encoding="utf-8")
        elif name.endswith(".ipynb"):
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
            out[name] = "\n\n".join("".join(c["source"]) for c in cells)
        elif name.endswith(".py") and name.startswith("zerosim/") and name != "zerosim/_compat.py":
            out[name] = _prose_of_code(path)
    return out


@pytest.mark.parametrize("text, stale", [
    # each kind found
    ("the backend (`cupy_nccl.py:68`) and `budget.py`", [("old file name", "cupy_nccl.py"),
                                                           ("old file name", "budget.py")]),
    ("see zerosim.zero.engine and zerosim.costs.memory_of", [("old path", "zerosim.zero.engine"),
                                                              ("old path", "zerosim.costs.memory_of")]),
    ("a key of zerosim.models.gpt._model.STRATEGIES", [("no such name", "zerosim.models.gpt._model.STRATEGIES")]),
    ("read zerosim/zero/engine.py and collectives/qgz.py", [("no such file", "zerosim/zero/engine.py"),
                                                            ("no such file", "collectives/qgz.py")]),
    # and what is right passes
    ("`zerosim/parallel/data/_engine.py`, parallel/data/_reduce.py, zerosim.parallel.data.ZeroEngine", []),
    ("zerosim.checkpoint.save(engine, DIR) and zerosim.analysis.costs.Link.alpha", []),  # a face's function; a field
    ("DeepSpeed 0.19.8 engine.py: _configure_optimizer", []),  # DeepSpeed's engine.py, named in its sentence
    ("KellerJordan/Muon's muon.py `Muon.step`. Then muon.py again.", [("old file name", "muon.py")]),  # 2nd: whose?
    ("transformers' models/llama/modeling_llama.py `LlamaMLP`", []),
    ("| a | DeepSpeed |\n| b | `engine.py` |", [("old file name", "engine.py")]),  # another row's owner: not this
])
def test_the_checker_finds_each_kind_of_stale_name(text, stale):
    assert stale_names(text) == stale


@pytest.mark.slow  # it imports every module a page names
def test_every_zerosim_module_named_in_docs_and_docstrings_exists():
    found = {name: stale for name, text in texts().items() if (stale := stale_names(text))}
    assert found == {}
