"""docs/explanation/architecture.md is the one map of the code: its section "The map" names every folder of zerosim/
and every module in it (private files and the few public ones), and nothing that is not there. A new file or folder
fails this test until the map has its row; a row whose file moved or went fails it too. Anywhere else on the page, a
path it names (`zerosim/...`, `tests/...`, or one inside zerosim such as `parallel/data/_engine.py`) must exist.

The tree: every folder under zerosim/ but __pycache__, and every .py file but the faces (__init__.py: the folder's
row stands for its face). Data files (configs, samples, the page's html and js) are described in their folder's
row, not listed."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "explanation" / "architecture.md"
PATH = re.compile(r"`((?:zerosim/)?[\w/]*[\w]+(?:\.py|/))`")


def tree(root: Path = ROOT) -> set:
    package = root / "zerosim"
    folders = {f"{p.relative_to(root)}/" for p in package.rglob("*") if p.is_dir() and p.name != "__pycache__"}
    modules = {str(p.relative_to(root)) for p in package.rglob("*.py") if p.name != "__init__.py"}
    return folders | modules | {"zerosim/"}


def the_map(text: str) -> str:
    start = text.index("\n## The map\n")
    end = text.find("\n## ", start + 1)
    return text[start: end if end > 0 else None]


def mapped(text: str) -> set:
    """Every `zerosim/...` path the map names (in its entries' titles and its tables' first column)."""
    return {p for p in PATH.findall(the_map(text)) if p.startswith("zerosim/")}


def test_the_map_names_every_folder_and_file_and_nothing_else():
    named, present = mapped(PAGE.read_text()), tree()
    assert not present - named, f"not in docs/explanation/architecture.md's map: {sorted(present - named)}"
    assert not named - present, f"in the map but not in the tree: {sorted(named - present)}"


def test_every_path_the_page_names_exists():
    for path in PATH.findall(PAGE.read_text()):
        if path.startswith("zerosim/"):
            assert (ROOT / path).exists(), path
        elif "/" in path:  # from the project's root (tests/...), or inside zerosim as the step's walk writes them
            assert (ROOT / path).exists() or (ROOT / "zerosim" / path).exists(), path


def test_a_missing_row_and_a_stale_row_are_both_found(tmp_path):
    """The check can fail both ways: a file the map lacks, and a row for a file that is gone."""
    text = PAGE.read_text()
    without = text.replace("| `zerosim/collectives/_ring.py` |", "| `zerosim/collectives/ring_gone.py` |")
    assert "zerosim/collectives/_ring.py" in tree() - mapped(without)
    assert "zerosim/collectives/ring_gone.py" in mapped(without) - tree()
