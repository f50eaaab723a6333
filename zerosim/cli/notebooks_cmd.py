"""The notebooks of the learning path, written from the installed package into a folder of yours: no clone needed.

    zerosim notebooks --out my-notebooks     # every notebook, outputs cleared; then: jupyter lab my-notebooks

Each notebook is written with its outputs cleared, so every prediction cell waits for your number before the run shows
its own (the learning path, docs/tutorials/, says which notebook each session opens). A notebook already in the folder
(your own work) is never overwritten: the command says which and writes nothing.
"""

from __future__ import annotations

import shlex

HELP = "write the learning path's notebooks into a folder of yours (outputs cleared: predict, then run)"


def add_arguments(p) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) folder for the notebooks")


def run(args) -> int:
    from zerosim.prose import wrap
    from zerosim.teaching import write_notebooks

    written = write_notebooks(args.out, "--out")
    words = (f"wrote {len(written)} notebooks into {args.out}, outputs cleared; open them with Jupyter (pip install "
             "'zerosim[notebooks]' installs it):")
    print("\n".join([*wrap(words, "  "), f"  jupyter lab {shlex.quote(args.out)}"]))  # the command on its own line
    return 0
