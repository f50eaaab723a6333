"""What every optimizer shares: state in the ledger, argument checks, scalars rounded once.

An optimizer is a small frozen dataclass of hyperparameters. It holds no arrays: its state lives in
buffers of the rank that owns the shard (`init_state`), and `step` updates a weight shard in place.

Numerics, common to all optimizers (each file lists its own operation order):

- All array arithmetic happens in `w.dtype`, one NumPy operation at a time, each rounded once.
- Every scalar coefficient (lr, beta, 1 - beta, 1 - beta**t, ...) is formed in float64 from the
  Python hyperparameters and then rounded *once* to `w.dtype`, as PyTorch passes Python doubles to
  an fp32 kernel. So `1 - 0.9` becomes fp32 0.1 (not fp32(1) - fp32(0.9) = 0.10000002).
- Nothing mixes elements, so stepping a flat buffer equals stepping any of its slices, bit for bit:
  this is what lets ZeRO shard optimizer state at every stage.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import ClassVar

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.precision import cast, get_format

# Elementwise optimizers step a long buffer in blocks of this many elements (`step_in_blocks`): the same bits as
# one whole-buffer step (nothing mixes elements), but each temporary stays in cache and below the allocator's mmap
# threshold. Measured for Adam on 919,296 fp32 params: 16 ms whole, 2.9 ms in blocks of 2**17, 7.8 ms in blocks
# of 2**19; on a 2.5M-element fp32 shard (10M parameters on 4 ranks): 27 ms whole, 8 ms in blocks of 2**17.
STEP_BLOCK = 2**17


def step_in_blocks(optimizer, w, g, state: dict, t: int, first_step: int = 1) -> None:
    """`optimizer.step(w, g, state, t, first_step=first_step)` on STEP_BLOCK elements at a time, nothing recorded:
    for an elementwise optimizer the same bits as one step over the whole buffer (reference/_oracle.py's speed
    yardstick and the engines' update, parallel/data/_update.py, step this way). w, g and each state array: (n,),
    as `step` takes them."""
    for a in range(0, max(w.shape[0], 1), STEP_BLOCK):
        b = a + STEP_BLOCK
        optimizer.step(w[a:b], g[a:b], {k: v[a:b] for k, v in state.items()}, t, first_step=first_step)


@dataclass
class OptimizerRun:
    """The steps an optimizer has taken in this process, as DeepSpeed's C++ CPU Adam counts them
    (csrc/includes/cpu_adam.h, Adam_Optimizer::IncrementStep, 0.19.8): `at(t)` says the step its current run of
    consecutive steps began at. A fresh one has taken none (`last` 0), so a run from the start begins at 1 and one
    resumed from a checkpoint of step T at T + 1; a step that is neither the last one again nor the next begins a
    new run. Only the "deepspeed-cpu" Adam's bits depend on it (its beta**t: optim/_cpu_adam.py); an engine and its
    oracle each keep one and pass `at(t)` to `Optimizer.step` as `first_step`."""

    first: int = 1
    last: int = 0

    def at(self, t: int) -> int:
        if t not in (self.last, self.last + 1):  # IncrementStep's `else` branch: std::pow at this step
            self.first = t
        self.last = t
        return self.first


def scalar(x: float, dtype) -> np.generic:
    """`x` (float64) rounded once to `dtype`, as a NumPy scalar of that dtype (never promotes arrays)."""
    x = float(x)  # the float64 the Python hyperparameter is; the sign keeps -0.0 apart from 0.0 in the cache
    return _rounded(x, math.copysign(1.0, x), np.dtype(dtype))


@functools.lru_cache(maxsize=256)
def _rounded(x: float, sign: float, dtype: np.dtype) -> np.generic:
    # Cached: a ZeRO engine steps one shard per rank, so the same coefficients are rounded N times a step
    # (NumPy scalars are immutable: sharing one is safe). Small: a step brings new ones (Adam's 1 - beta**t, a
    # schedule's lr) that are never asked again once it ends, and 4,096 of them held ~0.8 MB for good; the ones
    # every step asks (lr, betas, eps) are the most recent whatever the size.
    return cast(np.float64(x), dtype)[()]  # NOTE: not dtype(x): ml_dtypes rounds float64 twice


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


def check_nonneg(value: float, name: str) -> None:
    """lr, eps, weight decay: finite and >= 0 (lr = 0 is allowed: a step that moves nothing)."""
    if not (_is_real(value) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def check_betas(betas, n: int, name: str = "betas") -> tuple:
    """`betas` as a tuple of n numbers in [0, 1) (a list is accepted and turned into a tuple)."""
    if not (isinstance(betas, (tuple, list)) and len(betas) == n):
        raise ValueError(f"{name} must be a tuple of {n} numbers, got {betas!r}")
    for i, b in enumerate(betas):
        if not (_is_real(b) and 0.0 <= b < 1.0):
            raise ValueError(f"{name}[{i}] must lie in [0, 1), got {b!r}")
    return tuple(float(b) for b in betas)


def _is_array(a) -> bool:
    """A numpy array, or an array-like with a shape and a dtype (the meta backend's data-less arrays:
    the same optimizer code runs on them, and only shapes and dtypes come out)."""
    return isinstance(a, np.ndarray) or (hasattr(a, "shape") and hasattr(a, "dtype") and hasattr(a, "__array_ufunc__"))


def _writeable(a) -> bool:
    flags = getattr(a, "flags", None)  # CuPy's flags have no `writeable`: a device array is always writable
    return flags is None or getattr(flags, "writeable", True)


def check_step_args(w, g, state: dict, names: tuple, t) -> dict:
    """Validate a step's arguments and return {name: ndarray}; raises before anything is modified."""
    if not _is_array(w) or not _is_array(g):
        raise TypeError(f"w and g must be numpy arrays, got {type(w).__name__} and {type(g).__name__}")
    get_format(w.dtype)  # a clear error for integer or unknown dtypes
    if g.shape != w.shape or g.dtype != w.dtype:
        raise ValueError(f"g must match w: w is {w.shape} {w.dtype}, g is {g.shape} {g.dtype}")
    if not _writeable(w):
        raise ValueError("w is read-only; the optimizer updates it in place")
    if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
        raise TypeError(f"t must be an integer step count, got {t!r}")
    if t < 1:
        raise ValueError(f"t is the 1-based step count, so t >= 1; got {t}")
    if not isinstance(state, dict) or set(state) != set(names):
        got = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"state must hold exactly {list(names)}, got {got}")
    arrays = {}
    for n in names:
        a = state[n].array if hasattr(state[n], "array") else state[n]  # a ledger Buffer or its array
        if not _is_array(a) or a.shape != w.shape or a.dtype != w.dtype:
            desc = f"{a.shape} {a.dtype}" if _is_array(a) else type(a).__name__
            raise ValueError(f"state[{n!r}] must match w ({w.shape} {w.dtype}), got {desc}")
        if not _writeable(a):
            raise ValueError(f"state[{n!r}] is read-only; the optimizer updates it in place")
        arrays[n] = a
    return arrays


class Optimizer:
    """Base of the optimizers: subclasses are frozen dataclasses that define `_update`.

    Attributes:
        name: registry name ("adam", ...).
        state_names: one fp32 (or `dtype`) buffer per name, each the size of the weight shard.
        elementwise: True when element i's update reads only element i (shardable at every stage).
        allowed_stages: the ZeRO stages this optimizer can run under.
        why_not_sharded: why some stages are refused ("" when every stage is allowed).
        split_freely: True when an elementwise step's bits do not depend on where a call's region begins and ends
            either (stepping two regions end to end in one call gives each the bits of its own call).
    """

    name: ClassVar[str] = ""
    state_names: ClassVar[tuple] = ()
    elementwise: ClassVar[bool] = True
    allowed_stages: ClassVar[tuple] = (0, 1, 2, 3)
    why_not_sharded: ClassVar[str] = ""  # elementwise: each rank can update its own slice alone

    @property
    def split_freely(self) -> bool:
        return self.elementwise

    def state_bytes_per_param(self, dtype=np.float32) -> int:
        """Optimizer-state bytes per parameter (Adam in fp32: 2 x 4 = 8, seed 001's "4k bytes")."""
        return len(self.state_names) * np.dtype(dtype).itemsize

    def init_state(self, ledger, size: int, dtype=np.float32, prefix: str = "", fill=0) -> dict:
        """Allocate the zero-filled state for a shard of `size` params in `ledger`: {name: Buffer}.

        Each buffer is named f"{prefix}{name}" and has kind f"optim:{name}", so the ledger reports
        optimizer memory per state tensor. `fill=None` leaves them unwritten (a checkpoint load fills them).
        """
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise ValueError(f"size must be an integer >= 0, got {size!r}")
        get_format(dtype)
        # (size,) `dtype` state shard, owned by this rank
        return {
            n: ledger.alloc(f"{prefix}{n}", int(size), dtype, kind=f"optim:{n}", fill=fill) for n in self.state_names
        }

    def check_stage(self, stage: int) -> None:
        """Raise ValueError (with `why_not_sharded`) if this optimizer cannot run at ZeRO `stage`."""
        if stage not in self.allowed_stages:
            allowed = " or ".join(map(str, self.allowed_stages))
            raise ValueError(f"{self.name} cannot run at ZeRO stage {stage}: it needs whole weight matrices, which "
                             "this stage "
                             f"shards across ranks; use stage {allowed} (why: {type(self).__name__}.why_not_sharded)")

    def step(self, w: np.ndarray, g: np.ndarray, state: dict, t: int, record: dict | None = None,
             first_step: int = 1) -> None:
        """Update `w` and `state` in place from gradient `g` at 1-based step `t`.

        `state` maps each of `state_names` to an array (or ledger Buffer) shaped and typed like `w`.
        Arguments are checked before anything changes. If `record` is a dict, copies of the
        intermediates are stored in it (the keys each optimizer documents). `first_step` (1 <= first_step <= t):
        the step this process's run of consecutive steps began at (`OptimizerRun`): 1 from the start, T + 1 after a
        resume from step T; only DeepSpeed's CPU Adam reads it.
        """
        arrays = check_step_args(w, g, state, self.state_names, t)
        if isinstance(first_step, (bool, np.bool_)) or not isinstance(first_step, (int, np.integer)) \
                or not 1 <= first_step <= t:
            raise ValueError(f"first_step must be an integer step in 1..t = 1..{t}, got {first_step!r}")
        self._update(w, g, arrays, int(t), record, int(first_step))

    def _update(self, w, g, s, t, record, first_step) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError
