"""zerosim: see how ZeRO trains a model across many GPUs, with no GPU.

The package, bottom layer first (each folder's face, its `__init__`, is its API; the files behind it are private):

    precision     formats, casts, rounding, ulp, loss scalers, the mixed-precision policy
    backends      numpy (the simulator), meta (shapes only), mpi, cupy
    cluster       Cluster, Rank, MemoryLedger, Trace, Mesh and Groups: what each rank holds, what crossed a link
    collectives   reduce_scatter, all_gather, all_reduce, broadcast, all_to_all over a Cluster; results carry .handle
    optim         Adam, AdamW, SGD, Lion, Adan, Muon on flat shards
    models        layers as forward/backward pairs; MLP and TinyNet; the GPT and Llama families; meta twins; HF configs
    parallel      the parallelisms: data/ (ZeRO stages 0-3, FSDP2, HSDP / MiCS / hpZ, ZeRO++), ParallelDims, the
                  contract
    reference     Reference: the single-device oracle every stage equals bit for bit
    replay        seed 004's worked example on the live cluster, number for number
    analysis      costs (memory, communication), timeline (time), planner, numerics (against float64)
    frameworks    DeepSpeed configs read; real torch beside zerosim (parity); NCCL verified
    checkpoint    save(engine, DIR), load(DIR, cluster, model): sharded, resharded, consolidated
    train         train(TrainConfig(...)): what `zerosim train` runs
    viz, explore  figures from what a run recorded; explorers for a classroom
    teaching      exercises and week-sized assignments with their graders
    cli           the `zerosim` command

docs/explanation/architecture.md draws the layers and walks one ZeRO-3 step file by file.
"""

from zerosim import _compat
from zerosim._lazy import lazy_face

__version__ = "0.1.0"

# Each name of the face and the face that defines it, imported the first time it is asked for (PEP 562,
# zerosim/_lazy.py): `import zerosim` loads no NumPy and no subpackage, so the command line starts at once
# (tests/test_import_graph.py keeps it so); `from zerosim import ZeroEngine` loads what the engine needs, no more. A
# subpackage (zerosim.models, ...) or an old package (_compat.py's MOVED) is imported when first asked for too.
_FACES = {
    "zerosim.cluster": ("Buffer", "Cluster", "Groups", "LedgerError", "MemoryLedger", "Mesh", "Rank", "Trace"),
    "zerosim.collectives": ("ShardLayout", "all_gather", "all_reduce", "broadcast", "reduce_scatter"),
    "zerosim.models": ("MLP", "TinyNet"),
    "zerosim.optim": ("SGD", "Adam", "AdamW", "Adan", "Lion", "Muon", "get_optimizer"),
    "zerosim.parallel": ("ParallelDims", "Parallelism"),
    "zerosim.parallel.data": ("GradientRecipe", "Hooks", "ZeroEngine"),
    "zerosim.precision": ("FORMATS", "Format", "MixedPrecision", "cast", "get_format", "get_precision", "lost_update",
                          "ulp"),
    "zerosim.reference": ("Reference",),
}
__getattr__, __dir__ = lazy_face(__name__, _FACES)

__all__ = [
    "Adam", "AdamW", "Adan", "Buffer", "Cluster", "FORMATS", "Format", "GradientRecipe", "Groups", "Hooks",
    "LedgerError", "Lion", "MLP", "MemoryLedger", "Mesh", "MixedPrecision", "Muon", "ParallelDims", "Parallelism",
    "Rank", "Reference", "SGD",
    "ShardLayout", "TinyNet", "Trace", "ZeroEngine",
    "all_gather", "all_reduce", "broadcast", "cast", "get_format", "get_optimizer", "get_precision", "lost_update",
    "reduce_scatter", "ulp",
]


_compat.install()  # the old import paths (_compat.py's MOVED) answer, with a warning, until _compat.REMOVAL
