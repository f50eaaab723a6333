"""What a new user meets first when the input is wrong: one clear sentence, and nothing changed.

Each case is something a user typed (or passed) and the message the package must answer with.
"""

import io
import tracemalloc
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

from zerosim import MLP, Adam, Cluster, Reference, ZeroEngine
from zerosim.cli.main import main
from zerosim.cluster._budget import OutOfMemory


def snapshot(engine):
    return [engine.full_master().copy(), {k: v.copy() for k, v in engine.full_optimizer_state().items()}, engine.t]


@pytest.mark.bad_input("engine steps", unchanged=True)
def test_an_empty_micro_batch_is_refused_and_nothing_moves():
    engine = ZeroEngine(MLP([16, 4]), Cluster(4), 2, Adam(lr=1e-2))
    before = snapshot(engine)
    empty = [(np.zeros((0, 16), np.float32), np.zeros((0, 4), np.float32))] * 4
    with pytest.raises(ValueError, match="a micro-batch needs at least one sample"):
        engine.step(empty)
    after = snapshot(engine)
    assert np.array_equal(before[0], after[0]) and after[2] == 0  # no step taken, no weight moved


@pytest.mark.bad_input("models")
@pytest.mark.parametrize("widths", [[16.7, 4], [16, 4.0], [True, 4]])
def test_widths_that_are_not_whole_numbers_are_refused(widths):
    with pytest.raises(ValueError, match="MLP widths must be whole numbers"):
        MLP(widths)


@pytest.mark.bad_input("engine arguments")
def test_a_name_where_an_object_belongs_says_which():
    with pytest.raises(TypeError, match="optimizer must be a zerosim.optim optimizer"):
        Reference(MLP([3, 2]), "adam")
    with pytest.raises(TypeError, match="model must be a zerosim.models.Model"):
        ZeroEngine(None, Cluster(2), 1, Adam())


@pytest.mark.bad_input("sizes that cannot fit", unchanged=True)
def test_an_engine_too_large_for_the_machine_is_refused_before_allocating():
    tracemalloc.start()
    with pytest.raises(OutOfMemory, match=r"parameters on 2 rank\(s\) in this process .* this machine has .* GB "
                                          r"available"):
        ZeroEngine(MLP([200_000, 200_000, 4]), Cluster(2), 0, Adam())  # 4e10 parameters: ~1.3 TB of model states
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 50e6  # refused from the estimate: not one of the 4e10 weights was allocated


@pytest.mark.bad_input("sizes that cannot fit")
def test_more_ranks_than_any_job_are_refused_at_once():
    with pytest.raises(ValueError, match=r"would host 10,000,000 ranks in this process .* at most 1,048,576"):
        Cluster(10**7)


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("argv, message", [
    (["train", "--lr", "-1"], "--lr must be a finite number >= 0, got -1.0"),
    (["train", "--steps", "0"], "--steps must be at least 1, got 0"),
    (["train", "--accumulation-steps", "0"], "--accumulation-steps must be at least 1, got 0"),
    (["train", "--optimizer", "adam", "--muon-sharding", "owner"], "'adam' is not Muon: give --optimizer muon"),
    (["train", "--widths", "16"], "--widths needs at least an input and an output size"),
    (["memory", "--params", "1e30"], "--params 1e+30 is more than 1e+15 parameters"),
    (["memory", "--params", "7e9", "--unit", "module"], "--unit chooses how a --model preset is cut into units"),
    (["replay", "--lr", "1e30"], "--lr 1e+30 could move a weight by up to 3.16228e+30 per step, past fp16's largest "
                                 "finite value 65504"),
])
def test_bad_flags_get_one_clear_line(argv, message):
    code, out, err = cli(*argv)
    assert code == 2 and out == ""  # nothing printed as if it had run
    assert err.strip().startswith(f"zerosim {argv[0]}: error: ") and message in err and "\n" not in err.strip(), err
