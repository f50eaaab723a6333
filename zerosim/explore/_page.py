"""The memory explorer as one static HTML page: every setting computed in the browser, no server, no network.

    zerosim explore --html site/explorer          # writes site/explorer/index.html
    write_page("site/explorer")                   # the same from Python

The page is page.html with four things put in: the data (`page_data`: each shipped model's step compiled into
coefficients, _compile.py, read from steps.json; the GPUs' rates and capacities; the links; the controls), seed
004's step as `zerosim replay` narrates it (one part per screen), the glossary, and page.js, which computes and
draws the setting the controls select (page.js is _closed.py in JavaScript). Everything is inside the one file: it
opens from disk. tests/test_explore_browser.py drives it in a real headless browser against the CLI's --json.

The controls are rows of CONTROLS: a parallel degree that lands later (tensor parallel, offload) is a row here and a
term in _closed.py / page.js, nothing else.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from importlib import resources

from zerosim.explore._canvas import TIME
from zerosim.explore._settings import OPTIMIZERS, PRECISIONS, Settings
from zerosim.outputs import check_folder, write_atomic

PAGE = "index.html"
STEPS = "steps.json"  # _compile.py compile_all(), shipped: `python tools/compile_explorer.py` writes it again
RANKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # the N slider's stops (the box beside it takes any N)
SEQ_LENS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
MICRO_BATCHES = (1, 2, 4, 8, 16, 32)
STAGES = {0: "0: nothing sharded (plain data parallel)", 1: "1: optimizer states and master", 2: "2: + gradients",
          3: "3: + parameters"}


def controls(models: list, start: Settings) -> list:
    """The page's controls, in order: one row per `Settings` field (a select, or a slider over stops with a box
    for any whole number)."""
    from zerosim.analysis.costs import GPUS
    from zerosim.models.gpt import STRATEGIES

    rows = [
        ("model", "model", "select", models, None, None),
        ("ranks", "N: data-parallel GPUs", "range", RANKS, None, "the box takes any whole number"),
        ("stage", "ZeRO stage", "select", list(STAGES), STAGES, None),
        ("precision", "precision", "select", list(PRECISIONS), None, None),
        ("optimizer", "optimizer", "select", list(OPTIMIZERS), None, None),
        ("seq_len", "sequence length L (tokens)", "range", SEQ_LENS, None, "up to the model's positions"),
        ("micro_batch", "micro-batch B (sequences per GPU)", "range", MICRO_BATCHES, None, None),
        ("checkpoint", "activation checkpointing", "select", list(STRATEGIES), None, None),
        ("gpu", "GPU", "select", list(GPUS), {k: g.name for k, g in GPUS.items()}, None),
    ]
    out = []
    for name, label, kind, values, names, note in rows:
        row = {"name": name, "label": label, "type": kind, "values": list(values), "start": getattr(start, name)}
        if names:
            row["names"] = {str(k): v for k, v in names.items()}
        if note:
            row["note"] = note
        if isinstance(row["values"][0], int) and kind == "select":
            row["numeric"] = True
        out.append(row)
    return out


@lru_cache(maxsize=1)
def shipped_steps() -> dict:
    """steps.json: every shipped model's compiled step (_compile.py compile_all)."""
    return json.loads((resources.files("zerosim.explore") / STEPS).read_text("utf-8"))


def page_data(steps: dict | None = None, start: Settings = Settings()) -> dict:
    """Everything page.js reads (JSON-ready): the compiled steps and what the numbers need besides."""
    from zerosim.analysis.costs import GPUS, LINKS
    from zerosim.analysis.timeline import DEVICES
    from zerosim.explore._closed import GPUS_PER_NODE
    from zerosim.explore._compile import width
    from zerosim.explore._settings import config_for
    from zerosim.optim import get_optimizer
    from zerosim.precision import get_precision
    from zerosim.viz import kind_colour, kind_label, kind_order

    compiled = steps or shipped_steps()
    models = sorted({k.split("|")[0] for k in compiled["steps"]})
    kinds = ["params", "grads", "master", "activations", "grad32", "scratch"] + [
        f"optim:{n}" for o in OPTIMIZERS for n in get_optimizer(o).state_names]
    return {
        "tile": compiled["tile"], "steps": compiled["steps"],
        "models": {m: {"max_positions": config_for(m).max_positions, "params": compiled["steps"][
            next(k for k in compiled["steps"] if k.startswith(m + "|"))]["params"]} for m in models},
        "controls": controls(models, start),
        "gpus": {k: _gpu(g, DEVICES[g.device]) for k, g in GPUS.items()},
        # _numbers.py: NVLink 4 within a node of 8, InfiniBand NDR between nodes (two tiers)
        "links": {tier: {"name": LINKS[k].name, "alpha": LINKS[k].alpha, "bandwidth": LINKS[k].bandwidth,
                         "base": LINKS[k].base} for tier, k in (("intra", "nvlink4"), ("inter", "ib_ndr"))},
        "gpus_per_node": GPUS_PER_NODE,
        "precisions": {p: {"compute": get_precision(p).compute, "bytes": 4 if p == "fp32" else 2,
                           "master": p != "fp32", "width": width(p)} for p in PRECISIONS},
        "optimizers": {o: list(get_optimizer(o).state_names) for o in OPTIMIZERS},
        "kinds": {k: [kind_label(k), kind_colour(k), "gloss-" + _anchor(k)] for k in kind_order(set(kinds))},
        "glossary": "",  # the entries are on the page (#gloss-...)
        "time_colours": TIME,
    }


def _gpu(gpu, device) -> dict:
    """A GPU as page.js reads it: its capacity, and its device's HBM bandwidth and peak rate per compute format."""
    return {"name": gpu.name, "capacity": gpu.capacity, "device": device.name, "hbm": device.hbm,
            "rate": {f: device.rate(f) for f in ("fp16", "bf16", "fp32")}}


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


def write_page(folder: str, start: Settings = Settings(), steps: dict | None = None, flag: str = "") -> str:
    """Write `folder`/index.html (made if missing); returns the file's path. `steps`: compiled steps (default the
    shipped ones, steps.json); `start`: where the controls start; `flag`: the option that named `folder`.

    Refuses, before anything is written, a `folder` that is a file, cannot be written or is a checkpoint's
    (zerosim/outputs.py), or holds an index.html that is not an explorer page (a course site's own front page must
    not be overwritten)."""
    path = os.path.join(folder, PAGE)
    check_folder(folder, flag)
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            if "<title>ZeRO memory explorer (zerosim)</title>" not in f.read(4096):
                raise ValueError(f"{path} exists and is not a zerosim explorer page: give another folder")
    text = page_html(page_data(steps, start), step_frames())
    return write_atomic(path, lambda tmp: _write_text(tmp, text), flag)  # whole or not at all


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
