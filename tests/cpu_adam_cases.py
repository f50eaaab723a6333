"""The cases tools/record_ds_cpu_adam.py ran through DeepSpeedCPUAdam, and the inputs each draws from its seed
(shared by the recorder and tests/test_cpu_adam.py, so the recording stores only DeepSpeed's outputs)."""

from __future__ import annotations

import itertools

import numpy as np

# lengths: under one vector (all tail), one vector, a vector and a tail, the spans 8*16 and 4*16 with tails
LENGTHS = (5, 16, 37, 150)
CASES = [
    {"seed": i, "n": n, "params": params, "adamw_mode": adamw, "weight_decay": wd, "steps": steps, "lr": 1e-2,
     "betas": [0.9, 0.999], "eps": 1e-8, "bias_correction": True}
    for i, (n, params, adamw, wd, steps) in enumerate(itertools.product(
        LENGTHS, ("fp32", "bf16"), (True, False), (0.0, 0.1), (1, 7)))
]
CASES.append({"seed": len(CASES), "n": 37, "params": "fp32", "adamw_mode": True, "weight_decay": 0.0, "steps": 3,
              "lr": 1e-3, "betas": [0.8, 0.95], "eps": 1e-6, "bias_correction": False})  # no bias correction


def case_inputs(case: dict) -> tuple:
    """(w0, [g_1 .. g_K]): fp32 arrays, already representable in the case's param format (bf16 cases round them to
    bf16 first, as DeepSpeed receives bf16 tensors). Gradients span magnitudes 1e-6 to 10 so squares and the fused
    adds exercise many exponents."""
    from zerosim.precision import cast

    rng = np.random.default_rng(case["seed"])
    n = case["n"]

    def as_param(a):
        a = a.astype(np.float32)
        return a if case["params"] == "fp32" else cast(a, "bf16").astype(np.float32)

    w0 = as_param(rng.standard_normal(n))
    grads = [as_param(rng.standard_normal(n) * 10.0 ** rng.integers(-6, 2, n)) for _ in range(case["steps"])]
    return w0, grads
