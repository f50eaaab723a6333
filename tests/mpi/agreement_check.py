"""Under mpiexec: bad input on ONE rank must stop EVERY rank with the same error, not hang the others.

Rank 1 alone gets a NaN input (checked before anything runs), then rank 1 alone gets gradients that
overflow fp16 (checked after the reduction): each time every rank must raise, naming rank 1.
"""

import numpy as np
from mpi4py import MPI

from zerosim import MLP, Adam, Cluster, ZeroEngine
from zerosim.models import make_regression
from zerosim.precision import MixedPrecision

rank = MPI.COMM_WORLD.rank
said = []  # this rank's outcomes; rank 0 prints everyone's at the end (ranks' own prints may interleave)
n = MPI.COMM_WORLD.size
widths = [4, 5, 2]
batches = make_regression(np.random.default_rng(0), n, 3, widths)
mine = batches[rank]

engine = ZeroEngine(MLP(widths), Cluster(n, backend="mpi"), 2, Adam(lr=0.1))
x, t = mine
try:
    engine.step([(x * np.nan, t) if rank == 1 else (x, t)])
    said.append(f"rank {rank}: no error")
except ValueError as e:
    said.append(f"rank {rank}: ValueError: {e}")

# fp16 gradients overflow on rank 1 only: its targets are huge, so (y - t) * S is inf in fp16
engine = ZeroEngine(
    MLP(widths), Cluster(n, backend="mpi"), 1, Adam(lr=0.1), MixedPrecision("fp16", "fp32", loss_scale=2.0**12)
)
try:
    engine.step([(x, t * 1e4) if rank == 1 else (x, t)])
    said.append(f"rank {rank}: no error")
except FloatingPointError as e:
    said.append(f"rank {rank}: FloatingPointError: {e}")

everyone = MPI.COMM_WORLD.gather(said, root=0)
if rank == 0:
    print("\n".join(line for lines in everyone for line in lines), flush=True)
