"""Optimizer state stored in a narrower format than the arithmetic: widen on load, step, round on store.

A fused kernel given 16-bit state does exactly this per element: torch's fused Adam
(aten/src/ATen/native/cuda/fused_adam_utils.cuh, `adam_math`) loads `exp_avg` and `exp_avg_sq`
with `static_cast<opmath_t>` (fp32 for Half and BFloat16), does all its math in fp32, and stores them
back into the tensors' own dtype — torch keeps Adam's state in the parameter's dtype
(`torch.zeros_like(p)` in torch/optim/adam.py `_init_group`), so `model.half()` with
`Adam(fused=True)` runs with fp16 m and v. The update uses the fp32 values before the store; only the
*next* step sees them rounded. Widening fp16/bf16 to fp32 is exact, so the one rounding per step and
state element is the store, to nearest, ties to even (precision.cast). The widened copies are the kernel's
registers: no ledger records them (as none records Adam's m_hat, v_hat transients).

Not modelled here: 16-bit *arithmetic* on 16-bit state (torch's default foreach Adam on fp16 parameters rounds
every op to fp16, `_multi_tensor_adam`); zerosim's Adam run on fp16 arrays shows what that does (eps = 1e-8 is 0
in fp16), without torch's order of operations.

Seeds 000, 001 and 002 say the state must be fp32; this is how zerosim shows what happens when it is not
(MixedPrecision(optim_state="fp16"), tests/test_optim_state_format.py, notebooks/11_fp16_vs_bf16.ipynb).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from zerosim.precision import cast, get_format


def check_stored(optimizer, state_format, update_format) -> None:
    """Raise ValueError, before anything is allocated, where `optimizer` cannot keep its state in `state_format`:
    a matrix optimizer (Muon) forms its Nesterov input on the shard and brings whole matrices together
    (parallel/data/muon), a path the narrower state is not modelled on."""
    if get_format(state_format) != get_format(update_format) and not optimizer.elementwise:
        raise ValueError(f"{optimizer.name} keeps whole-matrix state; optimizer state in "
                         f"{get_format(state_format).name} is modelled for the elementwise optimizers only "
                         f"(adam, adamw, sgd, lion, adan): use optim_state None or {get_format(update_format).name}")


@contextmanager
def widened(state: dict, dtype):
    """{name: array} of state as the step computes on it, in `dtype` (a copy where a buffer is stored narrower,
    the buffer itself where it is not); on a normal exit each copy is rounded into its buffer. If the step
    raises, the buffers are left as they were."""
    dtype = np.dtype(dtype)
    work = {k: a if a.dtype == dtype else a.astype(dtype) for k, a in state.items()}  # exact: 16 -> 32 bits
    yield work
    for k, a in state.items():
        if work[k] is not a:
            a[...] = cast(work[k], get_format(a.dtype))  # the store: one rounding to nearest
