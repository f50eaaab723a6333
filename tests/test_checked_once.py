"""Each choice is checked once, where it is defined, and every other place that takes it calls that check.

    the ZeRO stage        `get_plan` (a number or a strategy's name) and `check_stage` (a number only), beside PLANS
                          in parallel/data/_plan.py: the engine, TrainConfig and train, the memory and communication
                          formulas, a checkpoint's manifest, the explorer and a DeepSpeed config's key call them; the
                          commands' parsers show cli/choices.py STAGES, a copy tests/test_cli_choices.py keeps equal
    the memory precisions MEMORY_PRECISIONS beside the formula (analysis/costs/_memory.py): `zerosim memory`'s flag
                          (through its copy) and the explorer read it
    a recipe's name       RECIPES and GradientRecipe (parallel/data/recipes/_recipes.py); the precision policy no
                          longer lists them (tests/test_recipe_choice.py)

Found by reading the code (the check below) and by feeding each place the same bad stage: the words are the one
check's.
"""

import ast
import json
from pathlib import Path

import pytest

import zerosim
from zerosim.parallel.data import STAGES, check_stage, get_plan

PACKAGE = Path(zerosim.__file__).resolve().parent
HOME = PACKAGE / "parallel" / "data" / "_plan.py"


def _written_out(node) -> bool:
    """A tuple, list or set of the stage numbers written out."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        return len(values) == len(node.elts) and sorted(values) == list(STAGES)
    return False


def _stage_table(node) -> bool:
    """The stages written out, or the table itself (PLANS, STAGES): a membership test by hand."""
    return _written_out(node) or isinstance(node, ast.Name) and node.id in ("PLANS", "STAGES")


def _names_a_stage(node) -> bool:
    return isinstance(node, ast.Name) and node.id == "stage" or isinstance(node, ast.Attribute) and node.attr == "stage"


def own_stage_checks(source: str) -> list:
    """Lines of `source` that decide by themselves whether a stage is valid: `stage in (0, 1, 2, 3)` or `in PLANS`,
    and a `--stage` (or `--stages`) flag whose allowed values are written out."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and _names_a_stage(node.left) and any(
                isinstance(op, (ast.In, ast.NotIn)) and _stage_table(c) for op, c in zip(node.ops, node.comparators)):
            found.append(node.lineno)
        if isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                               and "--stage" in a.value for a in node.args):  # a flag's own list
            found += [node.lineno] if any(_written_out(a) for a in node.args + [k.value for k in node.keywords]) else []
    return found


def test_the_reader_finds_a_stage_checked_by_hand():
    assert own_stage_checks("if s.stage not in (0, 1, 2, 3):\n    raise ValueError\n") == [1]
    assert own_stage_checks("ok = stage in PLANS\n") == [1]
    assert own_stage_checks("p.add_argument('--stage', type=int, choices=(0, 1, 2, 3))\n") == [1]
    assert own_stage_checks("_ints(args.stages, '--stages', (0, 1, 2, 3))\n") == [1]
    assert own_stage_checks("check_stage(s.stage)\np.add_argument('--stage', choices=STAGES)\n") == []


def test_no_module_but_the_plans_checks_a_stage_itself():
    found = {str(p.relative_to(PACKAGE)): lines for p in sorted(PACKAGE.rglob("*.py")) if p != HOME
             if (lines := own_stage_checks(p.read_text(encoding="utf-8")))}
    assert found == {}


def _deepspeed_config_with_stage(tmp_path, stage) -> None:
    from zerosim.frameworks.deepspeed import read_ds_config

    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": stage}}))
    read_ds_config(str(path), 8)


def _explorer_at(tmp_path, stage) -> None:
    from zerosim.explore import Settings

    Settings().with_(stage=stage)


def _memory_formula_at(tmp_path, stage) -> None:
    from zerosim.analysis.costs import model_state_memory

    model_state_memory(10**9, 8, stage)


def _comm_formula_at(tmp_path, stage) -> None:
    from zerosim.analysis.costs import comm_volume

    comm_volume(10**9, 8, stage)


WRONG = [4, -1, True, 2.0, "3"]
NUMBER_ONLY = [(place, stage) for place in (_memory_formula_at, _comm_formula_at, _explorer_at) for stage in WRONG]
# a DeepSpeed config's key is a whole number first (DeepSpeed's own type check: 2.0 is 2, True and "3" are refused as
# kinds), then a stage
NUMBER_ONLY += [(_deepspeed_config_with_stage, stage) for stage in (4, -1)]


@pytest.mark.bad_input("value")
@pytest.mark.parametrize("place, stage", NUMBER_ONLY, ids=lambda x: x.__name__.strip("_") if callable(x) else repr(x))
def test_every_place_that_takes_a_stage_number_refuses_with_the_one_checks_words(tmp_path, place, stage):
    with pytest.raises(ValueError) as one:
        check_stage(stage)
    with pytest.raises(ValueError) as theirs:
        place(tmp_path, stage)
    assert str(one.value).removeprefix("stage ") in str(theirs.value)


@pytest.mark.bad_input("value")
@pytest.mark.parametrize("stage", [4, True, 2.0, "hsdpp"])
def test_the_engine_and_a_training_run_refuse_a_stage_as_the_plans_do(stage):
    """(A checkpoint's manifest: tests/test_checkpoint_safety.py pins check_stage's words there.)"""
    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.train import TrainConfig

    with pytest.raises(ValueError) as plans:
        get_plan(stage)
    with pytest.raises(ValueError) as engine:
        ZeroEngine(MLP([2, 2]), Cluster(2), stage, Adam())
    with pytest.raises(ValueError) as config:
        TrainConfig(stage=stage, steps=1)
    assert str(engine.value) == str(config.value) == str(plans.value)


def test_the_stages_are_the_plans_numbers():
    assert STAGES == (0, 1, 2, 3) and all(get_plan(s).stage == s == check_stage(s) for s in STAGES)
