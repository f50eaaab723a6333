"""Compile the explorer page's grid into zerosim/explore/grid.json: `zerosim memory --json` and `zerosim timeline
--json` once for every setting of the page (zerosim/explore/_grid.py), run in this process, a worker per core.

    python tools/compile_explorer.py            # ~10 minutes on 2 cores (17,280 settings, 6,912 memory runs: 567 s)
    python tools/compile_explorer.py --jobs 16  # a worker per core of a bigger machine
    python tools/compile_explorer.py --where gpu=a100-40gb --where offload=cpu   # only the settings a change moved

`--where AXIS=VALUE` (repeated: all of them) compiles again only the settings with those values and keeps the shipped
grid's numbers for the rest: what a full compile writes when nothing else moved (tests/test_explore_page.py samples
the whole grid against the commands either way).

Run it when a number the commands print changes (tests/test_explore_page.py says so: it runs the CLI again at sampled
settings and compares with the shipped grid).
"""

import argparse
import json
import os
import sys
import time
from multiprocessing import get_context
from pathlib import Path

from zerosim.cli.explore_cmd import cli_json
from zerosim.explore._grid import AXES, MEMORY, NAMES, argv, compile_grid, pack, points, unpack


def str_values(name: str) -> list:
    return [str(v) for v in next(a for a in AXES if a.name == name).values]


def _part(todo):
    return compile_grid(cli_json, todo, show_progress=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: one per core)")
    p.add_argument("--where", action="append", default=[], metavar="AXIS=VALUE",
                   help="compile only the settings with this value (repeat for several axes); keep the rest")
    a = p.parse_args()
    jobs, where = a.jobs, dict(w.split("=", 1) for w in a.where)
    unknown = {k: v for k, v in where.items() if k not in NAMES or v not in str_values(k)}
    if unknown:
        p.error(f"--where {unknown}: not an axis and one of its values ({', '.join(NAMES)})")
    out = Path(__file__).resolve().parent.parent / "zerosim" / "explore" / "grid.json"
    numbers = unpack(json.loads(out.read_text())) if where else {}
    groups = {}  # the points one memory run answers stay in one part, so that it runs once
    for point in points():
        if all(str(point[k]) == v for k, v in where.items()):
            groups.setdefault(tuple(argv(point, MEMORY)), []).append(point)
    parts = list(groups.values())
    started = time.monotonic()
    with get_context("spawn").Pool(jobs) as pool:
        for n, done in enumerate(pool.imap_unordered(_part, parts, chunksize=4), 1):
            numbers.update(done)
            if n % 200 == 0 or n == len(parts):
                print(f"{n}/{len(parts)} memory runs' settings, {time.monotonic() - started:.0f} s", file=sys.stderr)
    grid = pack(numbers)
    out.write_text(json.dumps(grid, separators=(",", ":"), allow_nan=False) + "\n")
    print(f"wrote {out}: {len(grid['points'])} settings, {len(grid['memory'])} memory and {len(grid['time'])} time "
          f"records, {len(grid['errors'])} refusals, {out.stat().st_size / 1e6:.1f} MB, in "
          f"{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
