"""Backends plug in under the cluster: numpy (in-process simulator, default), meta (shapes, no data), mpi, cupy
(one GPU per rank, NCCL), cupy-sim (every rank on one GPU, the simulator's ring on the device).

    _base.py    the backend protocol: what a cluster needs from the machine underneath it
    _numpy.py   the default: all N ranks in this process, a send hands over a reference
    _meta.py    arrays with a shape and a dtype and no data: accounting at any scale
    mpi/        one process per rank (mpi4py), the ring over point-to-point messages
    cupy/       ranks on GPUs with NCCL, or every rank on one GPU

`make_backend` imports a backend (and mpi4py or CuPy) only when it is made.
"""

from __future__ import annotations

from zerosim.backends._base import available_bytes  # noqa: F401 (the host's free memory: cluster/ reads it here)

BACKENDS = ("numpy", "meta", "mpi", "cupy", "cupy-sim")


def make_backend(name: str, world_size: int, **options):
    """Create the backend called `name` for `world_size` ranks; heavy imports happen only here."""
    if name == "numpy":
        from zerosim.backends._numpy import NumpyBackend

        return NumpyBackend(world_size, **options)
    if name == "meta":
        from zerosim.backends._meta import MetaBackend

        return MetaBackend(world_size, **options)
    if name == "mpi":
        from zerosim.backends.mpi import MpiBackend  # mpi4py itself is imported only when the backend is made

        return MpiBackend(world_size, **options)
    if name == "cupy":
        from zerosim.backends.cupy import CupyBackend  # cupy itself is imported only when the backend is made

        return CupyBackend(world_size, **options)
    if name == "cupy-sim":
        from zerosim.backends.cupy import CupySimBackend  # cupy itself is imported only when the backend is made

        return CupySimBackend(world_size, **options)
    if name in BACKENDS:
        raise NotImplementedError(f"backend {name!r} is not built yet")
    raise ValueError(f"unknown backend {name!r}; choose one of {BACKENDS}")
