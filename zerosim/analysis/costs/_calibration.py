"""The framework factors: the one fitted number per efficiency preset, and the points they were fitted on.

A kernel benchmark measures one kernel alone; a training step also spends time between kernels (launches, Python,
FSDP's hooks, the allocator) and runs at the clocks a GPU sustains under load. `framework` is the fraction of the
kernel-benchmark speed (analysis/costs/_efficiency.py) a whole step reaches, and it is the only number fitted to runs.

How: for the calibration points (role "calibration" in _validation_points.py, each with its source), the
preset's factor minimises the sum of log²(predicted / measured tokens per second), over that preset's points
(analysis/planner/_validate.py fit: a point bound by communication barely moves with the factor and barely pulls it).
`zerosim validate --fit` reruns the fit and prints it; tests/test_validation.py checks that these constants are
what it gives. The held-out points were not looked at before these were fixed (docs/validation.md records the
order).
"""

from __future__ import annotations

# preset -> the fraction of kernel-benchmark speed a training step sustains (fitted; see the module docstring).
# The fit (zerosim validate --fit): eager 0.83972 on tt-h100-8-eager and tt-a100-64-8b-op; compiled 0.81401 on
# tt-h100-8-compile and tt-h100-8-compile-fp8. Calibration residuals then (predicted / measured − 1, tokens/s/GPU):
# +4.0 %, −4.0 %; +6.4 %, −6.1 %.
FRAMEWORK = {
    "eager": 0.840,
    "compiled": 0.814,
}
