"""The contract between the step and another parallelism (zerosim/parallel/_contract.py): where each point is called,
that the handles a parallelism returns are the ones the step's later work waits for, and that a parallelism that does
nothing changes no bit and no event of the data-parallel step."""

import numpy as np
import pytest
from helpers import bits

from zerosim import MLP, Cluster, ZeroEngine, get_optimizer
from zerosim.cluster import Compute, Handle, OptimizerStep
from zerosim.collectives import all_reduce
from zerosim.models import make_regression
from zerosim.parallel import Parallelism, Parallelisms


class Probe(Parallelism):
    """Records every point it is called at: (point, unit, kinds of the ops)."""

    name = "probe"

    def __init__(self):
        self.calls = []

    def setup(self, ctx):
        self.calls.append(("setup",))

    def before_unit(self, ctx, passes, ops):
        self.calls.append(("before", ops[0].layer, tuple(op.kind for op in ops)))
        return Handle()

    def after_unit(self, ctx, passes, ops):
        self.calls.append(("after", ops[0].layer, tuple(op.kind for op in ops)))
        return Handle()

    def end_of_backward(self, ctx, reduced):
        self.calls.append(("end of backward", len(reduced)))
        return Handle()

    def after_update(self, ctx):
        self.calls.append(("after update",))
        return Handle()


class Activations(Parallelism):
    """After every forward unit, all-reduces (MAX) one element per rank: a collective between units, whose handle the
    next unit's compute must name."""

    name = "activations"

    def after_unit(self, ctx, passes, ops):
        if ops[-1].kind != "forward":
            return Handle()
        ones = [np.ones(1, np.float32) for _ in ctx.ranks]
        out = all_reduce(ctx.cluster, ones, op="max", tag=f"probe {ops[0].layer}")
        return out.handle


def run(stage, parallelisms=(), steps=2, n=2):
    model = MLP([3, 5, 2])
    engine = ZeroEngine(model, Cluster(n), stage, get_optimizer("adam", lr=1e-2), "fp16-mixed",
                        params=model.init_params(np.random.default_rng(0)), parallelisms=parallelisms)
    data = make_regression(np.random.default_rng(1), n * steps, 4, [3, 5, 2])
    for s in range(steps):
        engine.step(data[s * n:(s + 1) * n])
    return engine


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_the_points_come_in_the_steps_order(stage):
    probe = Probe()
    engine = run(stage, (probe,), steps=1)
    ops = [(op.layer, op.kind) for op in engine.ops]
    expected = [("setup",)]
    for layer, kind in ops:
        expected += [("before", layer, (kind,)), ("after", layer, (kind,))]
    expected += [("end of backward", 2), ("after update",)]
    assert probe.calls == expected


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_parallelism_that_does_nothing_changes_no_bit_and_no_event(stage):
    plain, probed = run(stage), run(stage, (Probe(),))
    assert np.array_equal(bits(plain.full_params()), bits(probed.full_params()))
    assert np.array_equal(bits(plain.full_master()), bits(probed.full_master()))
    assert [repr(e) for e in plain.cluster.trace.log] == [repr(e) for e in probed.cluster.trace.log]
    for a, b in zip(plain.cluster.ranks, probed.cluster.ranks):
        assert a.ledger.peak_by_kind() == b.ledger.peak_by_kind()


def test_the_next_compute_waits_for_what_a_parallelism_sent():
    engine = run(1, (Activations(),), steps=1)
    log = engine.cluster.trace.log
    probes = {e.tag: e.call for e in log if hasattr(e, "tag") and str(e.tag).startswith("probe")}
    assert sorted(probes) == ["probe 0", "probe 1", "probe 2"]  # after each forward: fc0, act0, fc1
    computes = [e for e in log if isinstance(e, Compute) and e.rank == 0]
    for tag, call in probes.items():
        unit = int(tag.split()[1])
        after = [c for c in computes if c.kind != "forward" or c.layer > unit]
        assert call in after[0].needs  # the first compute after the probe's all-reduce names its handle


def test_end_of_backward_handles_reach_the_update():
    class Late(Parallelism):
        name = "late"

        def end_of_backward(self, ctx, reduced):
            return all_reduce(ctx.cluster, [np.zeros(1, np.float32) for _ in ctx.ranks], tag="late").handle

    engine = run(2, (Late(),), steps=1)
    log = engine.cluster.trace.log
    late = next(e.call for e in log if getattr(e, "tag", "") == "late")
    steps = [e for e in log if isinstance(e, OptimizerStep)]
    assert steps and all(late in e.needs for e in steps)


def test_bad_parallelisms_are_refused():
    with pytest.raises(TypeError, match="zerosim.parallel.Parallelism"):
        Parallelisms(("tp",))
    with pytest.raises(ValueError, match="each parallelism at most once"):
        Parallelisms((Probe(), Probe()))


def test_the_docs_example_parallelism_runs_and_prints_what_it_says(capsys):
    """docs/explanation/adding-a-parallelism.md's blocks, run as written: each print says what its comment says."""
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parent.parent / "docs" / "explanation" / "adding-a-parallelism.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    assert len(blocks) == 5  # ParallelDims, the small parallelism, context's ring and its training, a pipeline
    for block in blocks:
        exec(compile(block, str(page), "exec"), {})
        printed = capsys.readouterr().out.splitlines()
        said = [c.strip() for c in re.findall(r"print\(.*\)  # (.*)", block)]
        assert printed == said
