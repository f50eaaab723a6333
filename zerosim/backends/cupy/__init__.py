"""The CuPy backends: ranks on GPUs with NCCL collectives through `cupy.cuda.nccl` (one process driving several GPUs),
or every rank on one GPU running the simulator's ring (cupy-sim). CuPy is imported only when a backend is made.

    _backend.py             CupyBackend: one GPU per rank, every ring message a grouped ncclSend/ncclRecv
    _sim.py                 CupySimBackend: N simulated ranks on one GPU
    _nccl_collectives.py    NCCL's own collectives (ncclReduceScatter, ncclAllReduce, ncclAllGather)
    _nccl_types.py          how zerosim's formats travel through NCCL (bf16 as NCCL's own bf16)
    _probe.py               is the backend usable here? `import_cupy` answers or says what is missing
"""

from zerosim._lazy import lazy_face, names_of

# each name and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py): the command
# line names BackendUnavailable for every command (_probe.py), the backends only where one is made
_NAMES = {
    "._backend": ("CupyBackend",),
    "._probe": ("BackendUnavailable", "INSTALL_HINT", "NCCL_HINT", "import_cupy"),
    "._sim": ("CupySimBackend",),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)
__all__ = sorted(names_of(_NAMES))
