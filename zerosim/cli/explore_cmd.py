"""The memory explorer as a static web page for a course site: open it from disk, no server, no Python.

    zerosim explore --html site/explorer              # index.html: Llama 7B/8B/70B, GPT-3 175B; N 8 to 1024
    zerosim explore --html site/explorer --grid small # GPT-2 small/medium: a few seconds, for a first look

Every setting a control can reach is one run of the engine on the meta backend, recorded into the page
(`zerosim memory` / `zerosim timeline` give the same numbers); below it, seed 004's step, one part per click.
In a notebook the same explorer has live sliders: `from zerosim.explore import MemoryExplorer; MemoryExplorer()`.
"""

from __future__ import annotations

import sys

HELP = "the memory explorer as a self-contained web page (a precomputed grid) for a course site"


def add_arguments(p) -> None:
    p.add_argument("--html", required=True, metavar="DIR", help="folder to write index.html into (made if missing)")
    p.add_argument("--grid", choices=("default", "small"), default="default",
                   help="default: Llama-2 7B/70B, Llama-3 8B, GPT-3 175B x N 8/64/512/1024 x stages 0-3 x L 2k/4k x "
                        "checkpointing none/block (256 runs, under a minute); "
                        "small: GPT-2 small/medium (64 runs, seconds)")


def run(args) -> int:
    from zerosim.explore import DEFAULT, SMALL, write_page

    grid = SMALL if args.grid == "small" else DEFAULT
    path = write_page(args.html, grid, show_progress=sys.stderr.isatty(), flag="--html")
    print(f"wrote {path}: {grid.size} settings, each one step of the meta backend; open it in a browser "
          "(it needs no server and no network)")
    return 0
