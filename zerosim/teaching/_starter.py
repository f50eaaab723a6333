"""What a student gets, written from the installed package: an assignment's starter kit, and the notebooks.

    write_starter(get(1), "a1")            # a1/README.md, a1/a1_ring.py, a1/notebooks/02_...ipynb: no solution
    write_notebooks("zerosim-notebooks")   # every notebook, its outputs cleared: predict before you see

A student never clones the repository: `pip install zerosim`, then these two (`zerosim assignment starter N --out DIR`,
`zerosim notebooks --out DIR`). The kit is the handout (README.md), the file to fill in, and the notebooks the handout
asks to read; nothing of the instructor's (solutions, planted wrong ones, rubrics: course/instructor/ in the
repository, a package of its own) is in the package to be written out. A notebook is written with its outputs
cleared, so that each prediction cell is answered by the student's own run, not by a stored one.

Where the notebooks are: an installed wheel carries them in zerosim/teaching/notebooks/ (setup.py's build step copies
the repository's notebooks/ there, outputs cleared); an editable install reads the repository's notebooks/ itself.
Every file is checked before any is written (zerosim/outputs.py), and a file that is already there (a student's own
work) is never overwritten: the command says which and asks for another folder.
"""

from __future__ import annotations

import json
import os
import re
from importlib import resources
from pathlib import Path

NOTEBOOK = re.compile(r"notebooks/(\d\d_[A-Za-z0-9_]+\.ipynb)")  # how a handout names a notebook to read


def notebook_folder() -> Path:
    """The folder holding the notebooks: the wheel's copy, else the repository's (an editable install)."""
    shipped = resources.files("zerosim.teaching") / "notebooks"
    if shipped.is_dir():
        return Path(str(shipped))
    here = Path(__file__).resolve().parent.parent.parent / "notebooks"  # zerosim/teaching/ -> the repository
    if here.is_dir():
        return here
    raise ValueError("this zerosim install carries no notebooks (a build without setup.py's step): reinstall it "
                     "from its wheel, `pip install zerosim`")


def notebook_names() -> list:
    """Every notebook's file name, in the learning path's order (their numbers)."""
    return sorted(p.name for p in notebook_folder().glob("*.ipynb"))


def cleared(text: str) -> str:
    """A notebook's JSON with every code cell's outputs and execution count cleared (nbformat 4's fields)."""
    nb = json.loads(text)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def notebooks_named(text: str) -> list:
    """The notebooks a handout `text` names (notebooks/NN_name.ipynb), each once, in order."""
    return list(dict.fromkeys(NOTEBOOK.findall(text)))


def kit_files(a) -> dict:
    """{relative path: text} of assignment `a`'s starter kit: README.md (how to work, then the handout), the file to
    fill in, and notebooks/NAME for each notebook the handout names (outputs cleared)."""
    folder = notebook_folder()
    files = {"README.md": _readme(a), a.files: a.starter}
    for name in notebooks_named(a.handout):
        if not (folder / name).is_file():  # a handout naming a notebook that does not exist: the package's own slip
            raise ValueError(f"assignment {a.number}'s handout names notebooks/{name}, which this install lacks")
        files[f"notebooks/{name}"] = cleared((folder / name).read_text("utf-8"))
    return files


def _readme(a) -> str:
    n, f = a.number, a.files
    return (f"<!-- zerosim assignment {n}'s starter kit: `zerosim assignment starter {n} --out DIR` wrote it -->\n"
            f"**How to work.** Fill in `{f}` (every function raises NotImplementedError until you write it). "
            f"`zerosim assignment check {n} --file {f}` runs the visible tests, with the first counterexample and "
            "the misconception it matches; the hidden ones run when you submit. The notebooks this handout asks you to "
            "read are in `notebooks/` (`jupyter lab notebooks/`), their outputs cleared: type your predictions, then "
            "run. This folder holds no solution.\n\n" + a.handout)


def write_starter(a, folder: str, flag: str = "") -> list:
    """Write assignment `a`'s starter kit into `folder` (made if missing); returns the paths written. Refuses, before
    anything is written, a folder that cannot be written and any file of the kit that is already there."""
    return _write(kit_files(a), folder, flag)


def write_notebooks(folder: str, flag: str = "") -> list:
    """Write every notebook into `folder` (made if missing), outputs cleared; returns the paths written. Refuses,
    before anything is written, a folder that cannot be written and a notebook that is already there."""
    src = notebook_folder()
    return _write({name: cleared((src / name).read_text("utf-8")) for name in notebook_names()}, folder, flag)


def _write(files: dict, folder: str, flag: str) -> list:
    from zerosim.outputs import check_file, check_folder, write_atomic

    check_folder(folder, flag)
    paths = [os.path.join(folder, name) for name in files]
    there = [p for p in paths if os.path.lexists(p)]
    if there:
        raise ValueError(f"{flag + ' ' if flag else ''}{folder}: {there[0]} is there already (your work?); nothing "
                         "was written: give a new folder")
    for p in paths:
        check_file(p, flag)
    for p, text in zip(paths, files.values()):
        write_atomic(p, lambda tmp, text=text: Path(tmp).write_text(text, encoding="utf-8"), flag)
    return paths
