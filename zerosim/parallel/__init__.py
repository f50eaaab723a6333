"""The parallelisms, each a folder of its own, peers that speak to the step through one contract, and one record of
their degrees.

    _dims.py       ParallelDims: every parallel degree of a job (dp_replicate, dp_shard, tp, cp, pp), validated against
                   the world size, and the named mesh it lays the ranks out on (torchtitan's order and flattenings)
    _spec.py       ParallelSpec: the parallelisms beside data parallelism one job asks for (tp, sp, cp, their
                   options), checked once, and what builds a job's model from them
    _contract.py   Parallelism: the four points of a step where a parallelism acts (before / after a unit, at the
                   end of backward, after the update), each returning handles; Parallelisms fans them out
    data/          data parallelism: ZeRO stages 0-3, FSDP2, HSDP / MiCS / hpZ, ZeRO++ (the step itself)
    pipeline/      pipeline parallelism: stages over the pipeline ranks, schedules as tables, each stage's ranks a
                   data-parallel job driven phase by phase

docs/explanation/adding-a-parallelism.md walks a new parallelism through the contract, the data-parallel step its
example.
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._contract": ("Parallelism", "Parallelisms"),
    "._dims": ("FLATTENED", "ORDER", "ParallelDims"),
    "._spec": ("DEGREES", "FLAGS", "ParallelSpec"),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
