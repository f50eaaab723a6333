"""Save step 1, then die (SIGKILL) halfway through saving step 2: what a crash mid-save leaves behind.

    python tests/checkpoint_killed_save.py DIR

Used by tests/test_checkpoint.py, which then checks DIR: `latest` must still name step 1.
"""

import importlib
import os
import signal
import sys

import numpy as np

from zerosim import MLP, Adam, Cluster, ZeroEngine
from zerosim import checkpoint as ckpt
from zerosim.models import make_regression

directory = sys.argv[1]
widths, n = [4, 6, 3], 3
engine = ZeroEngine(MLP(widths), Cluster(n), 2, Adam(lr=1e-2), "bf16-mixed")
data = make_regression(np.random.default_rng(0), 2 * n, 3, widths)
engine.step(data[:n])
ckpt.save(engine, directory)
np.save(os.path.join(directory, "step1_master.npy"), engine.full_master())
engine.step(data[n:])

saving = importlib.import_module("zerosim.checkpoint._save")  # the module (the package exports a function of that name)
write, written = saving.write_bytes, []


def write_then_die(*args, **kwargs):
    if written:  # the second rank file: the process dies while writing it (its temporary file half written)
        with open(args[0], "wb") as f:
            f.write(args[1][: len(args[1]) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    written.append(write(*args, **kwargs))
    return written[-1]


saving.write_bytes = write_then_die
ckpt.save(engine, directory)
print("the save finished, which it must not", file=sys.stderr)
