"""Data parallelism across many nodes: the strategies' groups (HSDP, MiCS, hpZ, FSDP2's resharding) and the replicas'
all-reduce. The strategies themselves are plans (parallel/data/_plan.py: STRATEGIES).

    _data_mesh.py      DataMesh: a strategy on N ranks (its ParallelDims, its group, the nodes), every choice checked
                       once, in the caller's words (Spelling); check_nodes: ranks that fill nodes of G
    _groups.py         MeshGroups, mesh_groups: the world, shard, replicate, secondary, inter and intra groups
    _replicate.py      HSDP's and MiCS's all-reduce of a reduced shard over the replicate groups
    _group_layout.py   a layout cut over a shard group of S ranks, asked with world ranks
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._data_mesh": ("API", "DataMesh", "Spelling", "check_nodes"),
    "._group_layout": ("GroupLayout",),
    "._groups": (
        "FRAMEWORK_RECIPES", "MeshGroups", "check_matrix_optimizer", "check_recipe", "check_sub_mesh", "default_recipe",
        "default_size", "mesh_groups", "refuse_beside",
    ),
    "._replicate": ("AGREEMENTS", "PARTIAL", "replicate_op"),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
