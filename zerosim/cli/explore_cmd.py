"""The explorer as a self-contained web page for a course site: open it from disk, no server, no Python.

    zerosim explore --html site/explorer              # index.html: three models, 17,280 settings, drawn in the browser

Every number on the page is the CLI's: `zerosim memory --json` and `zerosim timeline --json` ran once for each setting
of its grid when the page's data was compiled (zerosim/explore/_grid.py; `python tools/compile_explorer.py` compiles
it again), and the page shows, under each setting, the two commands that print the same numbers in a terminal. In a
notebook the explorer has live sliders over any model and N: `from zerosim.explore import MemoryExplorer`.
"""

from __future__ import annotations

HELP = "the explorer as a self-contained web page for a course site (memory, time, overlap, offload, TP)"


def add_arguments(p) -> None:
    p.add_argument("--html", required=True, metavar="DIR", help="folder to write index.html into (made if missing)")


def run(args) -> int:
    from zerosim.explore import shipped_grid, write_page

    path = write_page(args.html, flag="--html")
    print(f"wrote {path}: {len(shipped_grid()['points']):,} settings, each the numbers of `zerosim memory --json` and "
          "`zerosim timeline --json`; open it in a browser (it needs no server and no network)")
    return 0


def cli_json(argv: list) -> dict:
    """`zerosim ARGV` (a command with --json) run in this process: its JSON, or a ValueError holding the one line it
    refused the flags with. The explorer's compile (tools/compile_explorer.py) and its tests read the CLI this way."""
    import contextlib
    import io
    import json

    from zerosim.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's own refusal
            code = e.code
    if code:
        said = err.getvalue().strip().splitlines()
        line = said[-1] if said else f"exit status {code}"
        raise ValueError(line.split(": error: ", 1)[-1])
    return json.loads(out.getvalue())
