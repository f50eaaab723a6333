"""Predict before you see: every section of every notebook that computes something asks for a prediction first, every
heading asks instead of tells, and no notebook carries an `assert` in the learner's way (what they guarded runs in
tests/notebook_checks.py, in the notebook's own kernel, when tests/test_notebooks.py executes it).

A section is a `## ` heading and the cells up to the next one (the cells before the first heading, the title's and
the imports', are not one). It computes when it holds a code cell that is not a prediction cell; such a section must
hold a prediction cell (tagged "predict", teaching/_predict.py) with a computing cell after it, so that the guess
comes before the run that answers it.
"""

import ast
import re
from pathlib import Path

import pytest
from notebook_checks import CHECKS

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
HEADING = re.compile(r"^(##+) (.+)$", re.M)


def read(path):
    """The notebook at `path`, through nbformat, imported when a test first reads one: not when the suite is collected
    (its import, jsonschema's with it, is ~1.9 s of collecting the whole suite, which the README's test command does in
    a test of its own: tests/test_readme_commands.py)."""
    nbformat = pytest.importorskip("nbformat", reason="install the notebooks extra: pip install -e '.[notebooks]'")
    return nbformat.read(path, as_version=4)


def sections(nb) -> list:
    """[(heading, [cells])] for every `## ` section of `nb`, in order."""
    out = []
    for cell in nb.cells:
        heads = [h for h in HEADING.findall(cell.source) if h[0] == "##"] if cell.cell_type == "markdown" else []
        if heads:
            out.append((heads[-1][1], []))
        elif out:
            out[-1][1].append(cell)
    return out


def is_prediction(cell) -> bool:
    return cell.cell_type == "code" and "predict" in cell.metadata.get("tags", [])


def unasked(nb) -> list:
    """The headings of the sections that compute without asking first."""
    out = []
    for heading, cells in sections(nb):
        computing = [i for i, c in enumerate(cells) if c.cell_type == "code" and not is_prediction(c)]
        asked = [i for i, c in enumerate(cells) if is_prediction(c)]
        if computing and not (asked and asked[0] < computing[-1]):
            out.append(heading)
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_section_that_computes_asks_for_a_prediction_first(path):
    nb = read(path)
    assert sections(nb), f"{path.name} has no sections"
    assert unasked(nb) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_heading_asks(path):
    nb = read(path)
    telling = [text for cell in nb.cells if cell.cell_type == "markdown"
               for level, text in HEADING.findall(cell.source) if len(level) >= 2 and "?" not in text]
    assert telling == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_notebook_asserts_and_every_check_finds_its_cell(path):
    nb = read(path)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    asserts = [c.splitlines()[0] for c in code if any(isinstance(n, ast.Assert) for n in ast.walk(ast.parse(c)))]
    assert asserts == []
    for anchor, check in CHECKS.get(path.name, []):
        assert sum(anchor in c for c in code) == 1, (path.name, anchor)
        ast.parse(check)


def test_the_counts_the_notebooks_page_quotes_and_that_the_rule_can_fail():
    books = [read(p) for p in NOTEBOOKS]
    total = sum(len(sections(nb)) for nb in books)
    computing = sum(any(c.cell_type == "code" and not is_prediction(c) for c in cells)
                    for nb in books for _, cells in sections(nb))
    asked = sum(is_prediction(c) for nb in books for c in nb.cells)
    page = " ".join((NOTEBOOKS[0].parent.parent / "docs" / "tutorials" / "notebooks.md").read_text().split())
    quoted = re.search(r"(\d+) sections, (\d+) of which compute, and (\d+) prediction cells", page)
    assert quoted and tuple(map(int, quoted.groups())) == (total, computing, asked)
    assert asked >= computing >= 70
    # a section whose prediction cell is dropped, or comes after every run, is found
    nb = read(NOTEBOOKS[0])
    heading, cells = next((h, c) for h, c in sections(nb) if any(map(is_prediction, c)))
    first = next(c for c in cells if is_prediction(c))
    nb.cells.remove(first)
    assert heading in unasked(nb)
