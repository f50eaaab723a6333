"""Worked examples replayed on the live cluster, number for number: seed 004's four weights on two GPUs (every stage,
fp16 or bf16, with loss scaling) and the same four weights on a 2 × 2 mesh (HSDP).

    _run.py       replay, replay_live: run the example and collect every number it narrates
    _text.py      narrate: the numbers as text, in seed 004's order
    _legend.py    how a value prints (compact, or with its exact twin), and the lost-update notes
    _scaling.py   the loss scaling of a step, in words
    _mesh.py      mesh_replay, narrate_mesh: one HSDP step told as "which GPU adds what, over which link"
    _tensor.py    tensor_replay, narrate_tensor: seed 004's first layer as a 2-way row-parallel linear (TP)
    _context.py   cp_replay, narrate_cp: one hop of ring attention's online-softmax merge on two GPUs (CP)
    _pipeline.py  pipeline_replay, narrate_pipeline: seed 004's network as 2 pipeline stages, its samples as 2
                  micro-batches through 1F1B (PP)
"""

from zerosim.replay._context import CP_STYLES, cp_replay, narrate_cp
from zerosim.replay._mesh import mesh_replay, narrate_mesh
from zerosim.replay._pipeline import narrate_pipeline, pipeline_replay
from zerosim.replay._run import MAX_STEPS, SEED_LR, replay, replay_live
from zerosim.replay._tensor import narrate_tensor, tensor_replay
from zerosim.replay._text import narrate

__all__ = ["CP_STYLES", "MAX_STEPS", "SEED_LR", "cp_replay", "mesh_replay", "narrate", "narrate_cp", "narrate_mesh",
           "narrate_pipeline", "narrate_tensor", "pipeline_replay", "replay", "replay_live", "tensor_replay"]
