"""The memory explorer as one static HTML page: a precomputed grid, no server, no network, no Python in the browser.

    zerosim explore --html site/explorer          # writes site/explorer/index.html
    write_page("site/explorer", grid=SMALL)       # the same from Python

The page is page.html with three things put in: the grid's numbers (_grid.py, every point a meta-backend step),
seed 004's step as `zerosim replay` narrates it (one part per screen, for the step-through), and page.js, the
code that draws the point the controls select as SVG. Everything is inside the one file: it opens from disk.
tests/test_explore_page.py checks every point's numbers against the meta backend and drives the page in a real
headless browser (tests/test_explore_browser.py).
"""

from __future__ import annotations

import json
import os
from importlib import resources

from zerosim.explore._canvas import TIME
from zerosim.explore._grid import AXES, DEFAULT, Grid, grid_data
from zerosim.outputs import check_folder, write_atomic

PAGE = "index.html"


def step_frames() -> list:
    """Seed 004's step as `zerosim replay` narrates it (stage 1, fp16-mixed, lr 0.1), cut at its blank lines."""
    from zerosim.replay import narrate, replay

    return [part.strip("\n") for part in narrate(replay()).split("\n\n") if part.strip()]


def _embed(value) -> str:
    """JSON safe inside a <script> element: '</' cannot close it."""
    return json.dumps(value, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")


def page_html(data: dict, frames: list) -> str:
    """The page's text for grid `data` (grid_data) and step-through `frames`."""
    here = resources.files("zerosim.explore")
    html, script = (here / "page.html").read_text("utf-8"), (here / "page.js").read_text("utf-8")
    return html.replace("/*GRID*/", _embed(data)).replace("/*STEPS*/", _embed(frames)).replace("/*SCRIPT*/", script)


def write_page(folder: str, grid: Grid = DEFAULT, show_progress: bool | None = None, flag: str = "") -> str:
    """Compute the grid and write `folder`/index.html (made if missing); returns the file's path.

    Refuses, before anything runs or is written, a `folder` that is a file or holds an index.html that is not an
    explorer page (a course site's own front page must not be overwritten)."""
    path = os.path.join(folder, PAGE)
    check_folder(folder, flag)  # before the grid runs (under a minute): a file, no way to write, a checkpoint
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            if "<title>ZeRO memory explorer (zerosim)</title>" not in f.read(4096):
                raise ValueError(f"{path} exists and is not a zerosim explorer page: give another folder")
    data = grid_data(grid, show_progress)
    data["start"] = {a: getattr(grid.fixed, a) for a in AXES}
    data["time_colours"] = TIME
    text = page_html(data, step_frames())
    return write_atomic(path, lambda tmp: _write_text(tmp, text), flag)  # whole or not at all


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
