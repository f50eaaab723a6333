"""The CuPy backends: ranks on GPUs with NCCL collectives through `cupy.cuda.nccl` (one process driving several GPUs),
or every rank on one GPU running the simulator's ring (cupy-sim). CuPy is imported only when a backend is made.

    _backend.py             CupyBackend: one GPU per rank, every ring message a grouped ncclSend/ncclRecv
    _sim.py                 CupySimBackend: N simulated ranks on one GPU
    _nccl_collectives.py    NCCL's own collectives (ncclReduceScatter, ncclAllReduce, ncclAllGather)
    _nccl_types.py          how zerosim's formats travel through NCCL (bf16 as NCCL's own bf16)
    _probe.py               is the backend usable here? `import_cupy` answers or says what is missing
"""

from zerosim.backends.cupy._backend import CupyBackend
from zerosim.backends.cupy._probe import INSTALL_HINT, NCCL_HINT, BackendUnavailable, import_cupy
from zerosim.backends.cupy._sim import CupySimBackend

__all__ = ["BackendUnavailable", "CupyBackend", "CupySimBackend", "INSTALL_HINT", "NCCL_HINT", "import_cupy"]
