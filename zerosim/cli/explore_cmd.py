"""The memory explorer as a static web page for a course site: open it from disk, no server, no Python.

    zerosim explore --html site/explorer              # index.html: every shipped model, any N, L, B, stage, ...

The page computes each setting in the browser from the shipped models' steps, compiled once into coefficients
(zerosim/explore/_compile.py; `python tools/compile_explorer.py` compiles them again): its numbers equal `zerosim
memory --json` and `zerosim timeline --json` for the same flags. Below it, seed 004's step, one part per click.
In a notebook the same explorer has live sliders: `from zerosim.explore import MemoryExplorer; MemoryExplorer()`.
"""

from __future__ import annotations

HELP = "the memory explorer as a self-contained web page for a course site (every setting computed in the browser)"


def add_arguments(p) -> None:
    p.add_argument("--html", required=True, metavar="DIR", help="folder to write index.html into (made if missing)")


def run(args) -> int:
    from zerosim.explore import shipped_steps, write_page

    path = write_page(args.html, flag="--html")
    print(f"wrote {path}: {len({k.split('|')[0] for k in shipped_steps()['steps']})} models, any N, L, B, stage, "
          "precision, optimizer, checkpointing and GPU, computed in the browser; open it in a browser (it needs no "
          "server and no network)")
    return 0
