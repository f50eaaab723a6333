"""Adam (Kingma & Ba, 2015) and AdamW (Loshchilov & Hutter, 2019), in three operation orders.

The formula is the same; where it rounds is not. `formula` picks whose order, and so whose bits:

"seed" (default): as seed 001 writes it. Every operation in w.dtype, rounded once (c(x) is the
float64 number x rounded once to w.dtype; see _base.py):

    m     = c(b1)*m + c(1-b1)*g                 # first moment
    v     = c(b2)*v + c(1-b2)*(g*g)             # second moment (g*g first, then the scale)
    m_hat = m / c(1 - b1**t)                    # bias corrections: b**t and 1 - b**t in float64,
    v_hat = v / c(1 - b2**t)                    #   the result rounded once to w.dtype
    update = (c(lr)*m_hat) / (sqrt(v_hat) + c(eps))   # eps outside the square root, as the seed
    w     = w - update

"torch": torch.optim.adam._single_tensor_adam (torch 2.13, the default for CPU tensors), fp32.
Python doubles become fp32 where the kernel reads them (`Scalar::to<float>`, one rounding):

    m = lerp(m, g, c(1-b1))        # Tensor.lerp_: ATen/native/Lerp.h lerp(), cpu/LerpKernel.cpp
                                   #   lerp_vec: |w| < 0.5 ? fma(w, g-m, m) : fma(w-1, g-m, g)
    v = v * c(b2)                  # mul_(beta2)
    v = fma(c(1-b2)*g, g, v)       # addcmul_(g, g, value=1-b2): self + value*t1*t2,
                                   #   cpu/PointwiseOpsKernel.cpp addcmul_cpu_kernel; the compiler
                                   #   fuses the last multiply and the add (see NOTE)
    bc1 = 1 - b1**t; bc2 = 1 - b2**t; step_size = lr/bc1; bc2_sqrt = bc2**0.5   # Python doubles
    denom = sqrt(v) / c(bc2_sqrt) + c(eps)
    w = w + (c(-step_size) * m) / denom          # addcdiv_(m, denom, value=-step_size):
                                                 #   self + value*t1/t2 (addcdiv_cpu_kernel)

  NOTE: fma(a, b, c) is a*b + c rounded once. PyTorch 2.13's CPU kernels for AVX2 and AVX-512
  fuse the two lerp and addcmul steps (`vec::fmadd` in lerp_vec; the compiler contracts
  addcmul's `self + value*t1*t2`). Checked against torch 2.13.0+cpu (AVX-512): with torch's own
  sqrt substituted, every element of 320 random 11-step runs matched, vector body and scalar
  tail. sqrt here is correctly rounded; torch's CPU fp32 sqrt is not quite (within 0.051 ulp of
  a rounding midpoint it returned the lower neighbour, for ~0.7% of random inputs), and there
  the bits differ. Under ATEN_CPU_CAPABILITY=default torch rounds the product and the sum
  separately, and its bits differ too. On CUDA, torch divides by a Python scalar through its
  fp32 reciprocal (BinaryDivTrueKernel.cu): not modelled here.
  AdamW first does w = w * c(1 - lr*wd) (`param.mul_(1 - lr * weight_decay)`, torch's
  decoupled_weight_decay branch; torch.optim.AdamW is Adam with decoupled_weight_decay=True).

"deepspeed": DeepSpeed's FusedAdam (deepspeed/ops/adam/fused_adam.py -> csrc/adam/
multi_tensor_adam.cu, AdamFunctor), in its operation order with fp32 (`MATH_T = float`)
arithmetic. lr, betas, eps and weight_decay arrive as C++ floats (one rounding each), the bias
corrections are `1 - std::pow(beta1, step)` of the *float* beta computed in double, then stored
in a float (multi_tensor_adam_cuda):

    m = b1*m + (1-b1)*g            # 1-b1 computed in fp32 from the fp32 b1
    v = b2*v + (1-b2)*g*g          # ((1-b2)*g)*g, left to right
    m_hat = m / bc1;  v_hat = v / bc2
    denom = sqrtf(v_hat) + eps
    update = m_hat / denom         # AdamW (ADAM_MODE_1): update = m_hat/denom + wd*w
    w = w - lr*update

  NOTE: this is the kernel's order with every operation correctly rounded. The real kernel is
  built with --use_fast_math (op_builder/fused_adam.py: nvcc_args), so on a GPU its divisions and
  sqrtf are approximate, subnormals flush to zero and nvcc may fuse a*b + c: its bits can differ
  from these by an ulp or so. Nothing here ran on a GPU.

"deepspeed-cpu": DeepSpeed's CPU Adam (DeepSpeedCPUAdam, what ZeRO-Offload steps on the host), operation by
operation in _cpu_adam.py: fused multiply-adds, beta**t as a running fp32 product from the first step this process
took (std::pow at that step when it is not 1: a resume; `first_step`), 1/sqrt(1 - b2**t) multiplied in. Adam is
its adamw_mode=False with weight_decay 0; AdamW its adamw_mode=True (DeepSpeed's default).

"torch", "deepspeed" and "deepspeed-cpu" model fp32 kernels, so they take fp32 state only.
"""

from __future__ import annotations

from dataclasses import field

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.optim._base import Optimizer, check_betas, check_nonneg, scalar
from zerosim.precision.cast import has_values

FORMULAS = ("seed", "torch", "deepspeed", "deepspeed-cpu")


@dataclass(frozen=True)
class Adam(Optimizer):
    """Adam on a flat shard: state m (first moment) and v (second moment), 8 bytes/param in fp32.

    `formula` ("seed", "torch", "deepspeed") picks whose operation order, and so whose bits (see
    the module docstring). `record` keys: "m", "v", "update" (w_new = w - update, rounded once)
    for every formula; "m_hat", "v_hat" for "seed" and "deepspeed"; "denom" for "torch" and
    "deepspeed".
    """

    lr: float = 1e-3  # PyTorch's default
    betas: tuple = (0.9, 0.999)  # (b1, b2): decay of the first and second moments, the paper's values
    eps: float = 1e-8  # added to sqrt(v_hat), outside the root (NOTE: rounds to 0 in fp16)
    formula: str = field(default="seed", kw_only=True)  # whose operation order: one of FORMULAS

    name = "adam"
    state_names = ("m", "v")

    @property
    def split_freely(self) -> bool:
        # DeepSpeedCPUAdam's last (n mod 16) elements of each call take its scalar tail's roundings (_cpu_adam.py)
        return self.formula != "deepspeed-cpu"

    def __post_init__(self):
        check_nonneg(self.lr, "lr")
        check_nonneg(self.eps, "eps")
        object.__setattr__(self, "betas", check_betas(self.betas, 2))
        if self.formula not in FORMULAS:
            raise ValueError(f"unknown Adam formula {self.formula!r}; choose one of {FORMULAS}")

    def _update(self, w, g, s, t, record, first_step=1):
        if self.formula != "seed":
            return self._kernel_step(w, g, s, t, record, first_step=first_step)
        dt = w.dtype
        b1, b2 = self.betas
        m, v = s["m"], s["v"]
        m *= scalar(b1, dt)
        m += scalar(1.0 - b1, dt) * g
        v *= scalar(b2, dt)
        v += scalar(1.0 - b2, dt) * (g * g)
        # Transients the size of the shard; a fused kernel would keep them in registers.
        m_hat = m / scalar(1.0 - b1**t, dt)
        v_hat = v / scalar(1.0 - b2**t, dt)
        update = scalar(self.lr, dt) * m_hat / (np.sqrt(v_hat) + scalar(self.eps, dt))
        w -= update
        if record is not None:
            record.update(m=m.copy(), v=v.copy(), m_hat=m_hat, v_hat=v_hat, update=update)

    def _kernel_step(self, w, g, s, t, record, wd: float = 0.0, first_step: int = 1):
        """The "torch", "deepspeed" or "deepspeed-cpu" step; `wd` is AdamW's decoupled weight decay (0 for Adam);
        `first_step` the step this process's run began at (only "deepspeed-cpu" reads it: _cpu_adam.py)."""
        if w.dtype != np.float32:
            raise ValueError(f"{type(self).__name__}(formula={self.formula!r}) models an fp32 kernel; the state is "
                             f"{w.dtype}")
        if not has_values(w):
            return  # the meta backend: shapes and dtypes do not change
        kernels = {"torch": self._torch, "deepspeed": self._deepspeed, "deepspeed-cpu": self._deepspeed_cpu}
        kernels[self.formula](w, g, s, t, record, wd, first_step)

    def _deepspeed_cpu(self, w, g, s, t, record, wd, first_step):
        """DeepSpeedCPUAdam.step (_cpu_adam.py): AdamW mode when there is a decoupled decay to apply."""
        from zerosim.optim._cpu_adam import cpu_adam_step  # this formula's alone: not a cost of importing Adam

        cpu_adam_step(w, g, s["m"], s["v"], t, self.lr, self.betas, self.eps, wd, adamw_mode=True, record=record,
                      first_step=first_step)

    def _torch(self, w, g, s, t, record, wd, first_step=1):
        """torch.optim.adam._single_tensor_adam, capturable=False, amsgrad=False, maximize=False."""
        from zerosim.optim._fma import fma32  # this formula's (and CPU Adam's): not a cost of importing Adam

        f32 = np.float32
        b1, b2 = self.betas
        m, v = s["m"], s["v"]
        if wd:
            w *= scalar(1.0 - self.lr * wd, f32)  # param.mul_(1 - lr * weight_decay)
            if record is not None:
                record["decayed"] = w.copy()
        weight = scalar(1.0 - b1, f32)  # lerp_'s Scalar weight, weight.to<float>()
        diff = g - m  # (N,) fp32: lerp_vec's `end - start`
        # lerp_vec: base + coeff*(end - start) in one fma, the branch on |weight| < 0.5 (Lerp.h)
        m[...] = fma32(weight, diff, m) if abs(weight) < 0.5 else fma32(weight - f32(1), diff, g)
        v *= scalar(b2, f32)  # exp_avg_sq.mul_(beta2)
        v[...] = fma32(scalar(1.0 - b2, f32) * g, g, v)  # .addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - b1**t  # Python doubles from here to the kernel's Scalar arguments
        bias_correction2 = 1 - b2**t
        step_size = self.lr / bias_correction1
        bias_correction2_sqrt = bias_correction2**0.5
        denom = self._sqrt(v) / scalar(bias_correction2_sqrt, f32) + scalar(self.eps, f32)  # (N,) fp32
        step = (scalar(-step_size, f32) * m) / denom  # addcdiv_'s value*t1/t2, then added to w
        w += step
        if record is not None:
            record.update(m=m.copy(), v=v.copy(), denom=denom, update=-step)

    def _sqrt(self, v):
        """exp_avg_sq.sqrt() of the "torch" formula, correctly rounded; the parity kit substitutes torch's own
        (zerosim/frameworks/torch/_sqrt.py), which on some CPUs is not correctly rounded (module docstring)."""
        return np.sqrt(v)

    def _deepspeed(self, w, g, s, t, record, wd, first_step=1):
        """multi_tensor_adam.cu AdamFunctor: ADAM_MODE_0 for Adam (decay 0), ADAM_MODE_1 for AdamW."""
        f32 = np.float32
        b1, b2 = scalar(self.betas[0], f32), scalar(self.betas[1], f32)  # `const float beta1, beta2`
        lr, eps, decay = scalar(self.lr, f32), scalar(self.eps, f32), scalar(wd, f32)
        # float bias_correction1 = 1 - std::pow(beta1, step): pow of the float beta, in double
        bc1 = scalar(1.0 - float(b1) ** t, f32)
        bc2 = scalar(1.0 - float(b2) ** t, f32)
        m, v = s["m"], s["v"]
        m[...] = b1 * m + (f32(1) - b1) * g
        v[...] = b2 * v + (f32(1) - b2) * g * g
        m_hat = m / bc1  # next_m_unbiased
        v_hat = v / bc2  # next_v_unbiased
        denom = np.sqrt(v_hat) + eps
        update = m_hat / denom
        if wd:
            update = update + decay * w  # ADAM_MODE_1: decoupled decay inside the update
        lr_update = lr * update
        w -= lr_update
        if record is not None:
            record.update(m=m.copy(), v=v.copy(), m_hat=m_hat, v_hat=v_hat, denom=denom, update=lr_update)


@dataclass(frozen=True)
class AdamW(Adam):
    """Adam with decoupled weight decay, in the chosen formula's place for it.

    "seed" and "torch": w *= 1 - lr*wd first (torch.optim.AdamW's order), then the Adam update;
    `record` adds "decayed" (the weights after the decay). "deepspeed": the decay sits inside the
    update, w -= lr*(m_hat/denom + wd*w) (FusedAdam's ADAM_MODE_1). "deepspeed-cpu": DeepSpeedCPUAdam's
    adamw_mode, w = fma(w, -lr*wd, w) before the update (_cpu_adam.py).
    """

    weight_decay: float = 0.01  # PyTorch's default for AdamW

    name = "adamw"

    def __post_init__(self):
        super().__post_init__()
        check_nonneg(self.weight_decay, "weight_decay")

    def _update(self, w, g, s, t, record, first_step=1):
        if self.formula != "seed":
            return self._kernel_step(w, g, s, t, record, self.weight_decay, first_step)
        w *= scalar(1.0 - self.lr * self.weight_decay, w.dtype)  # 1 - lr*wd formed in float64
        if record is not None:
            record["decayed"] = w.copy()
        super()._update(w, g, s, t, record, first_step)
