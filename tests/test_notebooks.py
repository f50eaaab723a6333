"""Every notebook in notebooks/ runs from top to bottom without an error (they are part of the product).

Needs the `notebooks` extra (nbclient, nbformat, ipykernel), which the README's test command installs;
in CI a missing extra is a failure, not a skip.
"""

import os
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))

if os.environ.get("CI"):
    import nbclient
    import nbformat
else:
    nbclient = pytest.importorskip("nbclient", reason="install the notebooks extra: pip install -e '.[notebooks]'")
    nbformat = pytest.importorskip("nbformat")


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no .ipynb files"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError naming the cell on any error
