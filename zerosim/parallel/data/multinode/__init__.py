"""Data parallelism across many nodes: the strategies' groups (HSDP, MiCS, hpZ, FSDP2's resharding) and the replicas'
all-reduce. The strategies themselves are plans (parallel/data/_plan.py: STRATEGIES).

    _data_mesh.py      DataMesh: a strategy on N ranks (its ParallelDims, its group, the nodes), every choice checked
                       once, in the caller's words (Spelling); check_nodes: ranks that fill nodes of G
    _groups.py         MeshGroups, mesh_groups: the world, shard, replicate, secondary, inter and intra groups
    _replicate.py      HSDP's and MiCS's all-reduce of a reduced shard over the replicate groups
    _group_layout.py   a layout cut over a shard group of S ranks, asked with world ranks
"""

from zerosim.parallel.data.multinode._data_mesh import API, DataMesh, Spelling, check_nodes
from zerosim.parallel.data.multinode._group_layout import GroupLayout
from zerosim.parallel.data.multinode._groups import (
                                                     FRAMEWORK_RECIPES,
                                                     MeshGroups,
                                                     check_matrix_optimizer,
                                                     check_recipe,
                                                     default_recipe,
                                                     default_size,
                                                     mesh_groups,
)
from zerosim.parallel.data.multinode._replicate import PARTIAL, replicate_op

__all__ = ["API", "DataMesh", "FRAMEWORK_RECIPES", "GroupLayout", "MeshGroups", "PARTIAL", "Spelling", "check_nodes",
           "check_matrix_optimizer", "check_recipe", "default_recipe", "default_size", "mesh_groups", "replicate_op"]
