"""How long a fresh interpreter takes to `import zerosim`, against `import numpy`, in turns, and what each loads.

Each sample is a new interpreter that runs X's line between two readings of its own CPU time (`time.process_time`,
every thread of the process; the interpreter's start-up is not in it): the yardstick, as every benchmark here reads
CPU time. Beside it, the wall time `python -X importtime -c "import X"` reports for X's line (cumulative microseconds
of its top-level imports), which is what a user waits on a quiet machine and more on a busy one. Samples alternate
between the contenders (each round in a new seeded order) so both see the same machine load; medians of --repeats,
with quartiles.

Every child runs with BLAS pinned to one thread (OPENBLAS_NUM_THREADS=1, as every benchmark here): importing NumPy
starts OpenBLAS's threads, one a core, and waits for them. Unpinned, `import numpy`'s wall time here read 55 ms in
one run and 107-119 ms in others at load 0.8-1.8, and 60-141 ms at load 5-7 where pinned samples taken in turns read
52-54 ms (five of six; 2026-11-25, -X importtime); with wall time as the yardstick, six runs of the same code at load
5-7 read 1.45 to 3.10. Its CPU time, BLAS pinned, read 1.96-2.12 over six such runs: both contenders load the same
NumPy the same way, and the load does not enter.

Beside them: the modules each import leaves in sys.modules (old-path stand-ins, zerosim/_compat.py, are not imports
and are not counted), and the wall time of whole `zerosim --help` and `zerosim <command> --help` processes, start-up
included, and the modules a command's parser loads (zerosim/cli/choices.py holds the names it shows, so it imports no
NumPy and no engine).

Target (issue 41, Must show 2): `import zerosim` ÷ `import numpy` <= 1.5; issue 63's (Must show 4): `from zerosim import
MLP, Adam, Cluster, ZeroEngine` ÷ `import numpy` <= 1.5.

Every interpreter here reads compiled bytecode, as an installed package's users do: pip compiles an installed
package's modules (NumPy's among them), and Python caches an editable one's on its first import, unless
PYTHONDONTWRITEBYTECODE forbids it (some shells and CI images set it). Then every import of zerosim compiles its
sources anew while NumPy's come compiled: the ratio measured compiling (about three quarters of zerosim's time here).
So the children run without that variable and with their caches under a temporary folder (`-X pycache_prefix`,
nothing written into the project), filled by one untimed run of each contender first.

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

from machine import cpu_name  # benchmarks/machine.py, beside this script
from trees import compiled_child  # benchmarks/trees.py

CONTENDERS = {"zerosim": "import zerosim", "numpy": "import numpy", "zerosim + ZeroEngine": "from zerosim import "
              "ZeroEngine", "a first script's names": "from zerosim import MLP, Adam, Cluster, ZeroEngine"}
COUNT = """
import json, sys
before = set(sys.modules)
{code}
print(json.dumps(sorted(m for m in set(sys.modules) - before if type(sys.modules[m]).__name__ != "_Moved")))
"""

HELP = "from zerosim.cli.main import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass"


PYTHON, ENV = compiled_child()  # compiled bytecode for every child (module docstring; trees.py)
ENV.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # BLAS pinned (docstring)


def top_level(code: str) -> dict:
    """{module: cumulative seconds} of the top-level imports importtime reports for `code` in a fresh interpreter."""
    out = subprocess.run([*PYTHON, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True,
                         env=ENV)
    found = {}
    for line in out.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line[len("import time:"):].split("|")
            if not name.startswith(" " * 2) and cumulative.strip().isdigit():  # one space: a top-level import
                found[name.strip()] = int(cumulative) / 1e6
    return found


STARTUP = set(top_level("pass"))  # what the interpreter imports before any code runs (site, encodings, ...)


def import_time(code: str) -> float:
    """Seconds `code`'s own imports took (wall): its top-level imports' cumulative times, start-up's left out."""
    return sum(t for name, t in top_level(code).items() if name not in STARTUP)


CPU = "import time\nt0 = time.process_time()\n{code}\nprint(time.process_time() - t0)"


def cpu_time(code: str) -> float:
    """CPU seconds `code` took in a fresh interpreter, every thread of the process, start-up left out."""
    out = subprocess.run([*PYTHON, "-c", CPU.format(code=code)], capture_output=True, text=True, check=True, env=ENV)
    return float(out.stdout.splitlines()[-1])


def quartiles(xs: list) -> tuple:
    q1, q2, q3 = statistics.quantiles(xs, n=4) if len(xs) > 1 else (xs[0],) * 3
    return q1, q2, q3


def loaded(code: str) -> list:
    out = subprocess.run([*PYTHON, "-c", COUNT.format(code=code)], capture_output=True, text=True, check=True,
                         env=ENV)
    return json.loads(out.stdout.splitlines()[-1])


def wall(argv: list) -> float:
    t0 = time.perf_counter()
    subprocess.run([*PYTHON, *argv], capture_output=True, check=False, env=ENV)
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"import times in fresh interpreters, BLAS on one thread, median of {args.repeats} in turns; load average "
          f"{load} (on {os.cpu_count()} cores of {cpu_name()})")
    cpu, times = ({name: [] for name in CONTENDERS} for _ in range(2))
    for code in CONTENDERS.values():
        top_level(code)  # untimed: compiles each module's bytecode into the cache once
    order = random.Random(0)
    for _ in range(args.repeats):
        names = list(CONTENDERS)
        order.shuffle(names)
        for name in names:
            cpu[name].append(cpu_time(CONTENDERS[name]))
            times[name].append(import_time(CONTENDERS[name]))
    numpy, numpy_wall = statistics.median(cpu["numpy"]), statistics.median(times["numpy"])
    print(f"  {'':<51} {'CPU ms':>7}   {'÷ numpy (quartiles of the ratio)':<34} {'wall ms':>7}  ÷ numpy")
    for name, code in CONTENDERS.items():
        mods = loaded(code)
        ours = sum(m.startswith("zerosim") for m in mods)
        t, w = statistics.median(cpu[name]), statistics.median(times[name])
        q1, _, q3 = quartiles([a / b for a, b in zip(cpu[name], cpu["numpy"])])  # each round's own ratio
        print(f"  {code:<51} {t * 1e3:7.1f}   {t / numpy:5.2f} ({q1:4.2f}-{q3:4.2f}){'':<22} {w * 1e3:7.1f}  "
              f"{w / numpy_wall:5.2f}   modules loaded {len(mods):4d} (zerosim's {ours})")
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
