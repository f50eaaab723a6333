"""How long a fresh interpreter takes to `import zerosim`, against `import numpy`, in turns, and what each loads.

Each sample is a new `python -X importtime -c "import X"`; the time is the cumulative microseconds importtime reports
for X's own line (the interpreter's start-up is not in it). Samples alternate between the contenders (each round in a
new seeded order) so both see the same machine load; medians of --repeats. Beside them: the modules each import
leaves in sys.modules (old-path stand-ins, zerosim/_compat.py, are not imports and are not counted), and the wall
time of whole `zerosim --help` and `zerosim <command> --help` processes, start-up included, and the modules a
command's parser loads (zerosim/cli/choices.py holds the names it shows, so it imports no NumPy and no engine).

Target (issue 41, Must show 2): `import zerosim` ÷ `import numpy` <= 1.5.

    python benchmarks/imports.py [--repeats 15]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

CONTENDERS = {"zerosim": "import zerosim", "numpy": "import numpy", "zerosim + ZeroEngine": "from zerosim import "
              "ZeroEngine"}
COUNT = """
import json, sys
before = set(sys.modules)
{code}
print(json.dumps(sorted(m for m in set(sys.modules) - before if type(sys.modules[m]).__name__ != "_Moved")))
"""

HELP = "from zerosim.cli.main import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass"


def top_level(code: str) -> dict:
    """{module: cumulative seconds} of the top-level imports importtime reports for `code` in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True)
    found = {}
    for line in out.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line[len("import time:"):].split("|")
            if not name.startswith(" " * 2) and cumulative.strip().isdigit():  # one space: a top-level import
                found[name.strip()] = int(cumulative) / 1e6
    return found


STARTUP = set(top_level("pass"))  # what the interpreter imports before any code runs (site, encodings, ...)


def import_time(code: str) -> float:
    """Seconds `code`'s own imports took: its top-level imports' cumulative times, start-up's left out."""
    return sum(t for name, t in top_level(code).items() if name not in STARTUP)


def loaded(code: str) -> list:
    out = subprocess.run([sys.executable, "-c", COUNT.format(code=code)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def wall(argv: list) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=False)
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"import times in fresh interpreters, median of {args.repeats} in turns; load average {load} "
          f"(on {os.cpu_count()} cores)")
    times = {name: [] for name in CONTENDERS}
    order = random.Random(0)
    for _ in range(args.repeats):
        names = list(CONTENDERS)
        order.shuffle(names)
        for name in names:
            times[name].append(import_time(CONTENDERS[name]))
    numpy = statistics.median(times["numpy"])
    for name, code in CONTENDERS.items():
        mods = loaded(code)
        ours = sum(m.startswith("zerosim") for m in mods)
        t = statistics.median(times[name])
        print(f"  {code:<32} {t * 1e3:7.1f} ms   ÷ import numpy {t / numpy:5.2f}   modules loaded {len(mods):4d} "
              f"(zerosim's {ours})")
    zerosim = os.path.join(os.path.dirname(sys.executable), "zerosim")
    for argv in (["--help"], ["memory", "--help"], ["train", "--help"], ["timeline", "--help"], ["plan", "--help"]):
        w = statistics.median(wall([zerosim, *argv]) for _ in range(5))
        mods = loaded(HELP.format(argv=argv))
        ours = sum(m.startswith("zerosim") for m in mods)
        print(f"  zerosim {' '.join(argv):<28} {w * 1e3:7.1f} ms wall, the whole process (median of 5); modules "
              f"loaded {len(mods):4d} (zerosim's {ours})")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
