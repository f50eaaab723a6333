"""DeepSpeed's CPU Adam (`DeepSpeedCPUAdam`, the optimizer ZeRO-Offload runs on the host), transcribed operation by
operation from DeepSpeed 0.19.8 (the PyPI release):

    deepspeed/ops/adam/cpu_adam.py   DeepSpeedCPUAdam.step: state['step'] += 1, then ds_opt_adam.adam_update(opt_id,
                                     step, lr, beta1, beta2, eps, weight_decay, bias_correction, p, grad, exp_avg,
                                     exp_avg_sq); exp_avg / exp_avg_sq in fp32 (fp32_optimizer_states=True)
    csrc/includes/cpu_adam.h         Adam_Optimizer::IncrementStep (beta**t: a running fp32 product, from
                                     std::pow where a run of steps begins), update_state (the bias
                                     corrections), Step_AVX (the vector body)
    csrc/adam/cpu_adam_impl.cpp      Step_8 -> Step_4 -> Step_1: AVX spans of 16*8, 16*4, 16 floats (AVX-512;
                                     8 floats under AVX2), then a scalar tail; ds_adam_step
    csrc/includes/simd.h             SIMD_FMA = _mm512_fmadd_ps; bf16 loads shift left 16, bf16 stores round to
                                     nearest even (store_16_f32_as_bf16_nearest)

Every hyperparameter reaches C++ as a `float` (one rounding from the Python double), and the arithmetic is fp32:

    b1, b2, eps, lr, wd = float(...)           # C++ floats
    b1^t, b2^t                                 # _betta1_t *= _betta1 each step (fp32 products, from 1.0f), but
                                               # the first step of a run at t0 > 1 (a resume) sets it to
                                               # std::pow(b1, t0) (see beta_power)
    bc1 = 1 - b1^t                             # update_state, in fp32
    bc2 = 1 / sqrt(1 - b2^t)                   # a reciprocal: the kernel multiplies by it
    step_size = -lr / bc1;   w_decay = -lr * wd
    g = fma(w, wd, g)                          # Adam mode (adamw_mode=False) with wd > 0: L2 into the gradient
    m = fma(g, 1 - b1, m * b1)                 # 1 - b1 in fp32 from the float b1 (not 1 - 0.9 rounded once)
    v = fma(g * g, 1 - b2, v * b2)
    d = fma(sqrt(v), bc2, eps)                 # sqrt(v / (1 - b2^t)) + eps, as one multiply-add
    u = m / d
    w = fma(w, w_decay, w)                     # AdamW mode (the default) with wd > 0: decoupled decay
    w = fma(u, step_size, w)

NOTE: the vector body and the scalar tail do not compute the same bits. Both fuse (GCC contracts `a * b + c` in
C++ at -O3), but where `momentum = momentum * b1; momentum = grad * b1m + momentum` has two products the tail fuses
the other one: fma(m, b1, grad*b1m) against the body's fma(grad, b1m, m*b1) (and the same for the variance). Found
by matching DeepSpeedCPUAdam built here by its own JIT builder (`-O3 -march=native -fopenmp -D__AVX512__`, GCC 12)
element by element: 320 runs of 5 steps, lengths 1 to 1000, fp32 and bf16 params, Adam and AdamW, with and without
weight decay, every bit equal (tests/test_cpu_adam.py keeps the check). The last (n mod 16) elements of each call
are the tail, and DeepSpeed calls it once per flat fp32 partition (stage_1_and_2.py `_optimizer_step`): so which
elements take the tail's rounding depends on how the model is partitioned. An engine and its oracle agree only when
they call it on the same regions (reference/_oracle.py `optimizer_calls`).
"""

from __future__ import annotations

import numpy as np

from zerosim.optim._base import scalar
from zerosim.optim._fma import fma32
from zerosim.precision.arithmetic import power_of_int

F32 = np.float32
# Floats per vector register of the machine DeepSpeed's builder compiled for: 16 under AVX-512 (`-D__AVX512__`, what
# op_builder/builder.py `simd_width` picks where the CPU has it, as here), 8 under AVX2; 0 for a build without either
SIMD_WIDTH = 16


def beta_power(beta: float, t: int, first_step: int = 1) -> np.float32:
    """beta^t as Adam_Optimizer::IncrementStep (csrc/includes/cpu_adam.h, 0.19.8) forms it in `_betta1_t` at step
    t, for a process whose optimizer's run of consecutive steps began at `first_step` (optim/_base.py
    OptimizerRun). The C++ optimizer is made with `_step` 0 and `_betta1_t` 1.0f, and at each `adam_update(step)`:

        step == _step + 1:  _betta1_t *= _betta1             a running fp32 product
        step == _step:      nothing                          another parameter group, the same step
        otherwise:          _betta1_t = std::pow(_betta1, step)

    So a run from the start (first_step 1) gives t fp32 products of the float beta from 1.0f, each rounded; a run
    resumed from a checkpoint of step T (a fresh DeepSpeedCPUAdam whose first call is at T + 1, first_step = T + 1)
    takes the pow branch there: std::pow(float, size_t) promotes both to double (C++11's arithmetic overloads),
    and the double is rounded to the float `_betta1_t` — beta**first_step rounded once to float32
    (precision/arithmetic `power_of_int`: the same float wherever the double pow is within half an ulp) — then
    t - first_step products. The two differ in the last bit for most steps (fp32(0.999)**3, fp32(0.9)**9)."""
    if int(t) == 0:
        return F32(1)  # before any step: `_betta1_t(1.0)`
    if not 1 <= first_step <= t:
        raise ValueError(f"first_step must lie in 1..t = 1..{t}, got {first_step!r}")
    b = scalar(beta, F32)
    key = (float(b), int(first_step))
    at, out = _RUNNING.get(key, (int(first_step), None))
    if out is None or at > t:
        at, out = int(first_step), power_of_int(float(b), int(first_step))  # pow(b, 1) = b = 1.0f * b
    for _ in range(int(t) - at):  # the products since the last step asked: one per step over a run, not t
        out = F32(out * b)
    _RUNNING[key] = (int(t), out)
    return out


# (beta, first step) -> (the last step asked, beta_power there): each rank's call at each step continues from it
_RUNNING: dict = {}


def cpu_adam_coefficients(t: int, lr: float, betas: tuple, eps: float, weight_decay: float,
                          bias_correction: bool = True, first_step: int = 1) -> dict:
    """The fp32 scalars one `adam_update` call at step `t` uses (update_state and Step_AVX's prologue), in a process
    whose optimizer's run began at `first_step` (`beta_power`)."""
    b1, b2 = scalar(betas[0], F32), scalar(betas[1], F32)
    alpha, wd = scalar(lr, F32), scalar(weight_decay, F32)
    bc1, bc2 = F32(1), F32(1)
    if bias_correction:
        bc1 = F32(F32(1) - beta_power(betas[0], t, first_step))  # _bias_correction1 = 1 - _betta1_t
        bc2 = F32(F32(1) / np.sqrt(F32(F32(1) - beta_power(betas[1], t, first_step))))  # 1/sqrt(1 - _betta2_t)
    return {"b1": b1, "b2": b2, "b1m": F32(F32(1) - b1), "b2m": F32(F32(1) - b2), "eps": scalar(eps, F32),
            "bc2": bc2, "step_size": F32(F32(-1 * alpha) / bc1), "wd": wd, "w_decay": F32(F32(-1 * alpha) * wd)}


def cpu_adam_step(w, g, m, v, t: int, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                  weight_decay: float = 0.0, bias_correction: bool = True, adamw_mode: bool = True,
                  record: dict | None = None, simd: int = SIMD_WIDTH, first_step: int = 1) -> None:
    """One `DeepSpeedCPUAdam.step` on one flat fp32 tensor, in place: w (params), m (exp_avg), v (exp_avg_sq) from
    the gradient g at step t (1-based). DeepSpeed's defaults: AdamW mode, bias correction on. The first
    ROUND_DOWN(n, simd) elements go through the vector body (fused multiply-adds), the last n mod simd through the
    scalar tail (each product and sum rounded); simd 0: a build without AVX, all scalar. For bf16 params, widen w and
    g to fp32 (simd.h's load shifts the bits left 16: exact), step, and round w back to nearest even.
    `first_step`: the step this process's run began at (`beta_power`: 1 from the start, T + 1 resumed from T)."""
    c = cpu_adam_coefficients(t, lr, betas, eps, weight_decay, bias_correction, first_step)
    body = w.shape[0] - w.shape[0] % simd if simd else 0  # ROUND_DOWN(_param_size, SIMD_WIDTH * span), span 8/4/1
    records = [step(w[part], g[part], m[part], v[part], c, adamw_mode)
               for part, step in ((slice(0, body), _vector_body), (slice(body, w.shape[0]), _scalar_tail))
               if part.stop > part.start]
    if record is not None and records:
        record.update({k: np.concatenate([r[k] for r in records]) for k in records[0]})


def _vector_body(w, g, m, v, c: dict, adamw_mode: bool) -> dict:
    """Step_AVX: every `simd_fma` one rounding, every `simd_mul` one."""
    decay = c["wd"] > 0  # `if (_weight_decay > 0 ...)`
    if decay and not adamw_mode:
        g = fma32(w, c["wd"], g)  # L2: simd_fma(grad_4, param_4, weight_decay4, grad_4)
    m[...] = fma32(g, c["b1m"], m * c["b1"])  # (n,) fp32 exp_avg: simd_mul, then simd_fma
    v[...] = fma32(g * g, c["b2m"], v * c["b2"])  # (n,) fp32 exp_avg_sq: g*g and v*b2 rounded, then simd_fma
    denom = fma32(np.sqrt(v), c["bc2"], c["eps"])  # (n,) fp32
    update = m / denom  # (n,) fp32
    if decay and adamw_mode:
        w[...] = fma32(w, c["w_decay"], w)  # param += w_decay * param
    w[...] = fma32(update, c["step_size"], w)
    return {"m": m.copy(), "v": v.copy(), "denom": denom, "update": update}


def _scalar_tail(w, g, m, v, c: dict, adamw_mode: bool) -> dict:
    """Step_1's loop as GCC 12 compiles it (-O3 -march=native: contraction on in C++). `momentum = momentum * b1;
    momentum = grad * b1m + momentum` has two products and GCC fuses the *first* one's: fma(m, b1, grad*b1m), not
    the vector body's fma(grad, b1m, m*b1); likewise the variance. Found by matching the built op element by
    element (tests/test_cpu_adam.py); another compiler may fuse otherwise."""
    decay = c["wd"] > 0
    if decay and not adamw_mode:
        g = fma32(w, c["wd"], g)  # grad = param * _weight_decay + grad: one product, fused
    m[...] = fma32(m, c["b1"], g * c["b1m"])
    v[...] = fma32(v, c["b2"], (g * g) * c["b2m"])
    denom = fma32(np.sqrt(v), c["bc2"], c["eps"])  # grad = grad * _bias_correction2 + _eps
    update = m / denom
    if decay and adamw_mode:
        w[...] = fma32(w, c["w_decay"], w)  # param += w_decay * param
    w[...] = fma32(update, c["step_size"], w)  # param = grad * step_size + param
    return {"m": m.copy(), "v": v.copy(), "denom": denom, "update": update}
