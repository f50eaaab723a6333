"""Backends plug in under the cluster: numpy (in-process simulator, default), meta (shapes, no data), mpi, cupy
(one GPU per rank, NCCL), cupy-sim (every rank on one GPU, the simulator's ring on the device)."""

from __future__ import annotations

BACKENDS = ("numpy", "meta", "mpi", "cupy", "cupy-sim")


def make_backend(name: str, world_size: int, **options):
    """Create the backend called `name` for `world_size` ranks; heavy imports happen only here."""
    if name == "numpy":
        from zerosim.backends.numpy_sim import NumpyBackend

        return NumpyBackend(world_size, **options)
    if name == "meta":
        from zerosim.backends.meta import MetaBackend

        return MetaBackend(world_size, **options)
    if name == "mpi":
        from zerosim.backends.mpi import MpiBackend  # mpi4py itself is imported only when the backend is made

        return MpiBackend(world_size, **options)
    if name == "cupy":
        from zerosim.backends.cupy_nccl import CupyBackend  # cupy itself is imported only when the backend is made

        return CupyBackend(world_size, **options)
    if name == "cupy-sim":
        from zerosim.backends.cupy_sim import CupySimBackend  # cupy itself is imported only when the backend is made

        return CupySimBackend(world_size, **options)
    if name in BACKENDS:
        raise NotImplementedError(f"backend {name!r} is not built yet")
    raise ValueError(f"unknown backend {name!r}; choose one of {BACKENDS}")
