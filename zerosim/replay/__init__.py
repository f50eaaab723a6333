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

Each name is imported the first time it is asked for (zerosim/_lazy.py): `zerosim replay` loads seed 004's step,
not the mesh's, TP's, CP's and PP's machinery it does not tell (tests/test_import_graph.py).
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it
_NAMES = {
    "._context": ("CP_STYLES", "cp_replay", "narrate_cp"),
    "._mesh": ("mesh_replay", "narrate_mesh"),
    "._pipeline": ("narrate_pipeline", "pipeline_replay"),
    "._run": ("MAX_STEPS", "SEED_LR", "replay", "replay_live"),
    "._tensor": ("narrate_tensor", "tensor_replay"),
    "._text": ("narrate",),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
