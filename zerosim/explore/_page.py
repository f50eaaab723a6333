"""The explorer as one static HTML page: every number the CLI's, looked up and drawn in the browser; no server, no
network.

    zerosim explore --html site/explorer          # writes site/explorer/index.html
    write_page("site/explorer")                   # the same from Python

The page is page.html with four things put in: the data (`page_data`: the grid of settings, each point's numbers from
`zerosim memory --json` and `zerosim timeline --json` as _grid.py compiled them into grid.json, and the controls with
the flags each value adds to the two commands), seed 004's step as `zerosim replay` narrates it (one part per screen),
the glossary, and page.js, which looks the selected setting up and draws it (it computes nothing: there is no model in
the page to drift from the package's). Everything is inside the one file: it opens from disk.
tests/test_explore_browser.py drives it in a real headless browser against the CLI run at test time.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from importlib import resources

from zerosim.explore._canvas import TIME
from zerosim.outputs import check_folder, write_atomic

PAGE = "index.html"
GRID = "grid.json"  # _grid.py's compile, shipped: `python tools/compile_explorer.py` writes it again
# where the controls start: Llama-2-7B on one node of 8 H100s at ZeRO-3, one 4k sequence, block checkpointing
START = {"model": "llama-2-7b", "gpus": 8, "tp": 1, "stage": 3, "seq_len": 4096, "checkpoint": "block",
         "gpu": "h100-80gb", "prefetch": "off", "bucket": "none", "overlap": "on", "offload": "none"}


@lru_cache(maxsize=1)
def shipped_grid() -> dict:
    """grid.json: every setting of the page and its numbers (_grid.py `pack`)."""
    return json.loads((resources.files("zerosim.explore") / GRID).read_text("utf-8"))


def page_data(grid: dict | None = None, start: dict | None = None) -> dict:
    """Everything page.js reads (JSON-ready): the grid and the controls, with the commands' flags per value."""
    from zerosim.explore._grid import APPLIES, AXES, BASE, WHY_NOT
    from zerosim.viz import kind_colour, kind_label, kind_order

    grid = grid or shipped_grid()
    start = dict(START, **(start or {}))
    kinds = {k for table in ("memory",) for r in grid[table] for part in ("at_peak", "resting") for k in r[part]}
    kinds |= {k for r in grid["memory"] if "host" in r for k in r["host"]["resting"]}
    return {
        "axes": [{"name": a.name, "label": a.label, "values": list(a.values), "start": start[a.name],
                  "names": {str(v): a.names.get(v, str(v)) for v in a.values}, "note": a.note,
                  "flags": {str(v): a.flags(v) for v in a.values}} for a in AXES],
        "base": BASE, "applies": {k: {o: list(v) for o, v in w.items()} for k, w in APPLIES.items()},
        "why_not": WHY_NOT, "grid": grid,
        "kinds": {k: [kind_label(k), kind_colour(k), "gloss-" + _anchor(k)] for k in kind_order(kinds)},
        "time_colours": TIME,
    }


def _anchor(kind: str) -> str:
    from zerosim.viz import glossary

    return glossary.get(kind).anchor


def step_frames() -> list:
    """Seed 004's step as `zerosim replay` narrates it (stage 1, fp16-mixed, lr 0.1), cut at its blank lines."""
    from zerosim.replay import narrate, replay

    return [part.strip("\n") for part in narrate(replay()).split("\n\n") if part.strip()]


def _embed(value) -> str:
    """JSON safe inside a <script> element: '</' cannot close it."""
    return json.dumps(value, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")


def page_html(data: dict, frames: list) -> str:
    """The page's text for `data` (page_data) and step-through `frames`."""
    from zerosim.viz import glossary

    here = resources.files("zerosim.explore")
    html, script = (here / "page.html").read_text("utf-8"), (here / "page.js").read_text("utf-8")
    return (html.replace("/*DATA*/", _embed(data)).replace("/*STEPS*/", _embed(frames))
            .replace("/*GLOSSARY*/", glossary.html()).replace("/*SCRIPT*/", script))


def write_page(folder: str, start: dict | None = None, grid: dict | None = None, flag: str = "") -> str:
    """Write `folder`/index.html (made if missing); returns the file's path. `grid`: a compiled grid (default the
    shipped one, grid.json); `start`: where the controls start (a point, or some of its axes).

    Refuses, before anything is written, a `folder` that is a file, cannot be written or is a checkpoint's
    (zerosim/outputs.py), or holds an index.html that is not an explorer page (a course site's own front page must
    not be overwritten)."""
    path = os.path.join(folder, PAGE)
    check_folder(folder, flag)
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            if "explorer (zerosim)</title>" not in f.read(4096):  # this page, or the older memory explorer
                raise ValueError(f"{path} exists and is not a zerosim explorer page: give another folder")
    text = page_html(page_data(grid, start), step_frames())
    return write_atomic(path, lambda tmp: _write_text(tmp, text), flag)  # whole or not at all


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
