"""The gradient recipe is a config of its own beside the precision policy (issue 21): `GradientRecipe`.

`ZeroEngine(..., recipe=...)` and `Reference(..., recipe=...)` take it; a policy's `reduction=` / `allreduce=`
stay a shorthand for the same choice (`with_(reduction=...)`, `--reduction`). Both ways give the same bits;
naming two different recipes is refused before anything is built; a checkpoint records the recipe.
"""

import numpy as np
import pytest
from helpers import bits

from zerosim import MLP, Adam, Cluster, GradientRecipe, Reference, ZeroEngine
from zerosim import checkpoint as ckpt
from zerosim.models import make_regression
from zerosim.precision import get_precision

WIDTHS = [3, 5, 2]


def run(stage, policy, recipe=None, n=3):
    model = MLP(WIDTHS)
    params = model.init_params(np.random.default_rng(1))
    engine = ZeroEngine(model, Cluster(n), stage, Adam(lr=1e-2), policy, params=params, recipe=recipe)
    oracle = Reference(model, Adam(lr=1e-2), policy, world_size=n, params=params, recipe=recipe,
                       reduce_every_micro_step=stage >= 2)
    data = make_regression(np.random.default_rng(2), 2 * n, 2, WIDTHS)
    for s in range(2):
        engine.step(data[s * n : (s + 1) * n])
        oracle.step(data[s * n : (s + 1) * n])
    assert np.array_equal(bits(engine.full_master()), bits(oracle.master()))
    return engine


@pytest.mark.parametrize("stage, name, allreduce", [(0, "ddp", "nccl"), (1, "deepspeed-zero12", "ring"),
                                                    (3, "deepspeed-zero3", "ring"), (3, "fsdp2", "ring")])
def test_the_recipe_as_config_or_as_the_policys_shorthand_gives_the_same_bits(stage, name, allreduce):
    bf16 = get_precision("bf16-mixed")
    config = run(stage, bf16, GradientRecipe(name, allreduce))
    shorthand = run(stage, bf16.with_(reduction=name, allreduce=allreduce))
    assert config.recipe == shorthand.recipe == GradientRecipe(name, allreduce)
    assert np.array_equal(bits(config.full_master()), bits(shorthand.full_master()))
    assert np.array_equal(bits(config.full_params()), bits(shorthand.full_params()))
    by_name = run(stage, bf16, name) if allreduce == "ring" else config  # a recipe's name alone is enough
    assert np.array_equal(bits(by_name.full_master()), bits(config.full_master()))


def test_the_default_recipe_is_the_seeds_protocol_on_a_ring():
    assert GradientRecipe() == GradientRecipe("seeds", "ring") == GradientRecipe.of(get_precision("fp16-mixed"))
    assert GradientRecipe("fsdp2").partition == "per-parameter dim 0"


@pytest.mark.bad_input("engine arguments", unchanged=True)
@pytest.mark.parametrize("recipe, message", [
    ("nope", "unknown reduction recipe 'nope'"),
    (GradientRecipe("deepspeed-zero3"), "the precision policy names GradientRecipe(reduction='fsdp2'"),
    (3, "recipe must be a GradientRecipe or a recipe's name, got 3"),
])
def test_a_bad_or_second_recipe_is_refused_before_anything_is_built(recipe, message):
    cluster = Cluster(2)
    with pytest.raises((ValueError, TypeError), match=message.replace("(", r"\(")):
        ZeroEngine(MLP(WIDTHS), cluster, 3, Adam(), get_precision("bf16-mixed").with_(reduction="fsdp2"), recipe=recipe)
    assert all(not r.ledger.live for r in cluster.ranks) and cluster.trace.log == []


def test_a_checkpoint_records_a_recipe_given_as_config(tmp_path):
    engine = run(3, get_precision("bf16-mixed"), GradientRecipe("deepspeed-zero3"))
    folder = ckpt.save(engine, str(tmp_path))
    loaded = ckpt.load(folder, Cluster(3), MLP(WIDTHS))
    assert loaded.recipe == GradientRecipe("deepspeed-zero3")
    assert np.array_equal(bits(loaded.full_master()), bits(engine.full_master()))
