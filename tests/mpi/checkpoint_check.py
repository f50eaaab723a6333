"""A resumed MPI run is the simulator's uninterrupted run: save (one writer per process), load, continue.

    mpiexec -n 2 python tests/mpi/checkpoint_check.py DIR

For each stage and precision: the MPI job takes 2 steps, saves into DIR/<case> (every process writes
its own rank's file), loads the checkpoint into a fresh MPI engine and takes 2 more; the simulator
takes the same 4 steps without stopping. This rank's master shard, optimizer state and 16-bit params
must equal the simulator's rank r, bit for bit.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from harness import bits, main

from zerosim import MLP, Adam, Cluster, ZeroEngine
from zerosim import checkpoint as ckpt
from zerosim.models import make_regression

WIDTHS = [5, 7, 3]  # P = 5*7+7 + 7*3+3 = 66: uneven on 4 ranks


def body(h) -> None:
    n, r, directory = h.world_size, h.rank, sys.argv[1]
    model = MLP(WIDTHS)
    data = make_regression(np.random.default_rng(11), 4 * n, 3, WIDTHS)
    steps = [data[s * n : (s + 1) * n] for s in range(4)]
    for stage in range(4):
        for precision in ("fp16-mixed", "bf16-pure-sr"):
            case = f"stage{stage}-{precision}"
            sim = ZeroEngine(model, Cluster(n), stage, Adam(lr=1e-2), precision)
            mpi = ZeroEngine(model, Cluster(n, backend="mpi"), stage, Adam(lr=1e-2), precision)
            for b in steps[:2]:
                sim.step(b)
                mpi.step([b[r]])
            ckpt.save(mpi, os.path.join(directory, case))
            resumed = ckpt.load(os.path.join(directory, case), Cluster(n, backend="mpi"), model)
            for b in steps[2:]:
                h.check(f"{case}: loss", resumed.step([b[r]])[0], sim.step(b)[r])
            h.check(f"{case}: master", bits(resumed.master_shards()[0]), bits(sim.master_shards()[r]))
            for k, v in resumed.optimizer_shards()[0].items():
                h.check(f"{case}: optimizer {k}", bits(v), bits(sim.optimizer_shards()[r][k]))
            h.check(f"{case}: params", bits(resumed.compute_params(0)), bits(sim.compute_params(r)))


if __name__ == "__main__":
    main(body, "checkpoint_check")
