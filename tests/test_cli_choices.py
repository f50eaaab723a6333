"""The names a command's parser shows, written in zerosim/cli/choices.py so that `--help` imports no machinery, equal
to the library tables they copy, order included (the help prints them in that order): a name added to a table and
not to choices.py fails here, not on a user's command line."""

import importlib

import pytest

from zerosim.cli import choices

# choices.py's name -> (the face that holds the table, the table as the parsers used it before the copy)
TABLES = {
    "MODEL_PRESETS": ("zerosim.analysis.costs", lambda m: tuple(sorted(m.PRESETS))),
    "CONFIG_PRESETS": ("zerosim.analysis.costs",
                       lambda m: tuple(sorted(k for k, v in m.PRESETS.items() if v.config is not None))),
    "GPUS": ("zerosim.analysis.costs", lambda m: tuple(m.GPUS)),
    "ALLOCATOR_RESERVE": ("zerosim.analysis.costs", lambda m: m.ALLOCATOR_RESERVE),
    "HOSTS": ("zerosim.analysis.costs", lambda m: tuple(m.HOSTS)),
    "LINKS": ("zerosim.analysis.costs", lambda m: tuple(sorted(m.LINKS))),
    "MEMORY_PRECISIONS": ("zerosim.analysis.costs", lambda m: tuple(m.MEMORY_PRECISIONS)),
    "DEVICES": ("zerosim.analysis.timeline", lambda m: tuple(sorted(m.DEVICES))),
    "OPTIMIZERS": ("zerosim.optim", lambda m: tuple(m.OPTIMIZERS)),
    "SHARDINGS": ("zerosim.optim", lambda m: tuple(m.SHARDINGS)),
    "CHECKPOINTING": ("zerosim.models.gpt", lambda m: tuple(m.ALL_STRATEGIES)),
    "LOSSES": ("zerosim.models.meta", lambda m: tuple(m.LOSSES)),
    "TP_LAYOUTS": ("zerosim.parallel.tensor", lambda m: tuple(m.LAYOUTS)),
    "SEQUENCE_TASKS": ("zerosim.models.data", lambda m: tuple(m.TASKS)),
    "PRECISION_PRESETS": ("zerosim.precision", lambda m: tuple(sorted(m.PRESETS))),
    "REDUCTIONS": ("zerosim.precision", lambda m: tuple(m.REDUCTIONS)),
    "ALLREDUCES": ("zerosim.precision", lambda m: tuple(m.ALLREDUCES)),
    "OPTIM_STATES": ("zerosim.precision", lambda m: tuple(m.OPTIM_STATES)),
    "FP8_RECIPES": ("zerosim.precision.quantize", lambda m: tuple(m.FP8_RECIPES)),
    "STAGES": ("zerosim.parallel.data", lambda m: m.STAGES),
    # a strategy some releases lack carries them: "mics (DeepSpeed <= 0.19.6)"
    "MESH_STRATEGIES": ("zerosim.parallel.data", lambda m: tuple(
        f"{n} ({p.release.split(' (')[0]})" if p.release else n for n, p in m.STRATEGIES.items())),
    "MAX_SIMULATED_RANKS": ("zerosim.train", lambda m: m.MAX_SIMULATED_RANKS),
    "MAX_REPLAY_STEPS": ("zerosim.replay", lambda m: m.MAX_STEPS),
    "SEED_LR": ("zerosim.replay", lambda m: m.SEED_LR),
    "EXERCISES": ("zerosim.teaching.exercises", lambda m: tuple(m.EXERCISES)),
    "CP_STYLES": ("zerosim.parallel.context", lambda m: tuple(m.STYLES)),
    "CP_SPLITS": ("zerosim.parallel.context", lambda m: ("zigzag",) + tuple(s for s in m.SPLITS if s != "zigzag")),
    "REPLAY_CP_STYLES": ("zerosim.replay", lambda m: tuple(m.CP_STYLES)),
    "PP_SCHEDULES": ("zerosim.parallel.pipeline", lambda m: tuple(m.SCHEDULES)),
    "PP_SPLITS": ("zerosim.parallel.pipeline", lambda m: tuple(m.RULES)),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_each_copy_equals_its_table(name):
    face, table = TABLES[name]
    assert getattr(choices, name) == table(importlib.import_module(face))


def test_every_copy_is_checked():
    assert {n for n in vars(choices) if n.isupper()} == set(TABLES)
