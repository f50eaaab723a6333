"""Compile every shipped model's step for the explorer's web page into zerosim/explore/steps.json.

    python tools/compile_explorer.py          # ~4 minutes: 14 models x 6 checkpointing strategies x 2 widths

Run it when the engine changes what a step holds (tests/test_explore_closed.py says so: its freshness test
compiles a sample again and compares).
"""

import json
import sys
from pathlib import Path

from zerosim.explore import compile_all

if __name__ == "__main__":
    out = Path(__file__).resolve().parent.parent / "zerosim" / "explore" / "steps.json"
    data = compile_all(show_progress=sys.stderr.isatty())
    out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {out}: {len(data['steps'])} compiled steps")
