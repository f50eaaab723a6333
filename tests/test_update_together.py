"""Every rank's optimizer step at once (parallel/data/_update.py `_update_together`, small regions) gives the bits and
events of the loop over ranks.

Yardstick: the same engine on `Cluster(N, stack_ranks=False)`, whose update steps rank by rank (the path the oracle
tests check): every rank's master, optimizer state and params bit for bit after each step, the whole log pickled to
bytes. Each case counts the steps taken together, so a case that never takes that path fails instead of passing for
nothing; a NaN, an inf and a -0 in the masters step elementwise as in the loop."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from helpers import same, snapshot

import zerosim.parallel.data._update as update_module
from zerosim import MLP, Cluster, ZeroEngine, get_optimizer
from zerosim.models import make_regression

# (stage, precision, optimizer, ranks, engine options, whether the ranks step together)
CASES = [
    (3, "bf16-mixed", "adam", 8, {}, True),  # the yardstick's small case, on fewer ranks
    (2, "fp16-mixed", "adamw", 3, {}, True),  # each rank's shard of its whole params buffer; fp16's loss scale
    (1, "bf16-mixed", "lion", 4, {}, True),
    (0, "bf16-mixed", "sgd", 3, {}, True),  # every rank steps the whole model
    (3, "bf16-mixed", "adam", 5, {"recipe": "fsdp2"}, True),  # per-parameter chunks: padding inside every region
    (3, "bf16-mixed", "adam", 4, {"optim_state": "bf16"}, False),  # 16-bit stored state: the loop
    (3, "bf16-mixed", "adamw", 5, {"formula": "deepspeed-cpu"}, False),  # DeepSpeedCPUAdam: each call's tail
]


def _run(case, stack: bool, steps: int = 3, odd: bool = False):
    stage, precision, opt, n, extra, _ = case
    extra = dict(extra)
    policy = precision
    if "optim_state" in extra:
        from zerosim import get_precision

        policy = get_precision(precision).with_(optim_state=extra.pop("optim_state"))
    widths = [5, 7, 6, 3]
    model = MLP(widths)
    data = make_regression(np.random.default_rng(2), n * steps, 3, widths)
    formula = {"formula": extra.pop("formula")} if "formula" in extra else {}
    engine = ZeroEngine(model, Cluster(n, stack_ranks=stack), stage, get_optimizer(opt, lr=1e-2, **formula), policy,
                        params=model.init_params(np.random.default_rng(3)), **extra)
    seen = []
    for s in range(steps):
        if odd and s == steps - 1:  # before the last update (forward reads the params): a NaN, an inf, a -0
            for rank in engine.cluster.ranks:
                rank.master.array[:3] = [np.nan, np.inf, -0.0]
        engine.step(data[s * n:(s + 1) * n])
        seen.append(snapshot(engine))
    return engine, seen


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{'-'.join(c[4]) or 'plain'}")
def test_every_ranks_step_at_once_gives_the_loops_bits_and_log(case, monkeypatch):
    calls = []
    real = update_module._update_together
    monkeypatch.setattr(update_module, "_update_together", lambda *a: calls.append(1) or real(*a))
    together, seen = _run(case, True)
    ran = len(calls)
    loop, seen_loop = _run(case, False)
    assert len(calls) == ran and (ran > 0) == case[5]  # never with stack_ranks=False
    assert same(seen, seen_loop)
    assert pickle.dumps(together.cluster.trace.log) == pickle.dumps(loop.cluster.trace.log)


@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_nan_inf_and_negative_zero_step_as_in_the_loop(opt):
    case = (3, "bf16-mixed", opt, 4, {}, True)
    together, seen = _run(case, True, odd=True)
    loop, seen_loop = _run(case, False, odd=True)
    assert np.isnan(together.master_shards()[0][0])  # the NaN stepped on, in every rank's region
    assert same(seen, seen_loop)
