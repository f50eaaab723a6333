"""Small training runs for the exercises that put a learner's function inside a ZeRO engine.

Each case trains a tiny MLP for two steps with an engine and with the single-device oracle on the same
micro-batches (`grading.train_against_oracle`); the learner's function takes one of the engine's named
extension points (`zerosim.parallel.data.Hooks`), so nothing in the package is patched. Letters: N ranks, K micro-steps
per step (gradient accumulation).
"""

from __future__ import annotations

import numpy as np

STEPS = 2  # the second step starts from what the first left behind: a stale or half-refreshed model shows


def run_case(case: dict, hooks=None, precision=None, lr: float = 1e-2, data_scale=None) -> None:
    """Train case["widths"] at case["stage"] on case["n"] ranks with case["k"] micro-steps per step, engine
    (with `hooks`: the learner's function at its extension point, parallel/data/_hooks.py) against the oracle; raises
    Counterexample."""
    from zerosim.cluster import Cluster
    from zerosim.models import MLP, make_regression
    from zerosim.optim import Adam
    from zerosim.parallel.data import ZeroEngine
    from zerosim.reference import Reference
    from zerosim.teaching.exercises._grading import train_against_oracle

    n, k, stage = case["n"], case.get("k", 1), case["stage"]
    policy = precision if precision is not None else case.get("precision", "fp16-mixed")
    model = MLP(list(case["widths"]))
    rng = np.random.default_rng(case.get("seed", 0))
    params = model.init_params(rng)
    pairs = make_regression(rng, n * k * STEPS, 2, list(case["widths"]))
    if data_scale is not None:  # per input feature, e.g. to put some gradients near fp16's underflow
        pairs = [(x * np.asarray(data_scale, np.float32), t) for x, t in pairs]
    steps = []
    for s in range(STEPS):
        mine = pairs[s * n * k : (s + 1) * n * k]
        steps.append([mine[r * k] if k == 1 else mine[r * k : (r + 1) * k] for r in range(n)])
    reference = Reference(model, Adam(lr=lr), policy, world_size=n, params=params, accumulation_steps=k,
                          reduce_every_micro_step=stage >= 2)
    train_against_oracle(lambda: ZeroEngine(model, Cluster(n), stage, Adam(lr=lr), policy, params=params,
                                            accumulation_steps=k, hooks=hooks), reference, steps)


def describe(case: dict) -> str:
    k = case.get("k", 1)
    return (f"ZeRO-{case['stage']}, MLP {list(case['widths'])} on {case['n']} ranks"
            + (f", {k} micro-steps per step" if k > 1 else "") + f", {case.get('precision', 'fp16-mixed')}, {STEPS} "
                                                                 "Adam steps")
