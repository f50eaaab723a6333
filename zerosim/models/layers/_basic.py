"""Layers as explicit forward/backward pairs: Linear, ReLU, GELU.

Letters: B batch, D_in input width, D_out output width. Activations are row-major (B, D).

Where each rounding happens (`fmt` is the compute format; `acc` is float32, or float64 when fmt is
fp64 — see `acc_dtype`). Widening fmt -> acc is exact, so every output below is rounded exactly once:

    Linear forward   y  = cast(x_acc @ w_acc.T + b_acc, fmt)   products summed in acc, as tensor cores do
    Linear backward  dx = cast(dy_acc @ w_acc, fmt)
                     dw = cast(dy_acc.T @ x_acc, fmt)          the batch sum happens in acc too
                     db = cast(sum_B dy_acc, fmt)
    ReLU             exact both ways: it selects values and never rounds
    GELU (tanh form) y  = cast(gelu(x_acc), fmt);  dx = cast(dy_acc * gelu'(x_acc), fmt)

With fmt = fp32 the same code runs and the casts change nothing; with fmt = fp64 everything is
float64, the reference that finite differences check.

What is saved: every layer here saves exactly its input, `cache = {"input": x}` (seed 001 §4: a
linear layer needs its input for dW; an elementwise op needs its input for sigma'(x)). Weights are
*not* saved: backward receives them again, which is why ZeRO-3 gathers a layer's weights a second
time. (The plain function pairs below keep a tuple `(x,)`; the Layer objects name it.)
"""

from __future__ import annotations

import functools
import math

import numpy as np

from zerosim.precision import Format, cast, get_format, is_ml_dtype
from zerosim.precision.arithmetic import arithmetic_of

GELU_K = math.sqrt(2.0 / math.pi)  # tanh-form GELU (Hendrycks & Gimpel 2016; GPT-2's "gelu_new")
GELU_C = 0.044715


def acc_dtype(fmt: Format) -> type:
    """The dtype products and sums accumulate in: float64 for the fp64 reference, else float32."""
    return np.float64 if (fmt if type(fmt) is Format else get_format(fmt)).name == "fp64" else np.float32


def rounded(z, f: Format):
    """`z`, a temporary this module just computed in acc, rounded once into `f`: `cast(z, f)`, but `z` itself
    where it is already in f (fp32 compute, fp64 reference), since cast's copy would change no bit.

    NOTE: operands only read (the widenings `.astype(acc, copy=False)` below) are not copied either; every
    widening fmt -> acc that does change the dtype still makes its array. In an fp32 step the two copies
    per weight matrix and the copy of each dW were 16% of a 10M-parameter step (benchmarks/peers.py).

    From float32 into bf16 or fp8 the rounding is ml_dtypes' own `astype`, one rounding to nearest even, which is
    what `cast` does too; it is made directly (a fifth of a small step went through cast's front door). NumPy warns
    there only of a signalling NaN, which no arithmetic makes (tests/test_cast_plain.py)."""
    if z.dtype == f.dtype:
        return z
    if z.dtype == np.float32 and is_ml_dtype(f.dtype):
        return z.astype(f.dtype)
    return cast(z, f)



# -- plain functions: the math, one pair per op ---------------------------------------------------

def linear_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, fmt) -> tuple[np.ndarray, tuple]:
    """y = x @ w.T + b for x (B, D_in), w (D_out, D_in), b (D_out,) or None; returns (y (B, D_out), (x,))."""
    f = get_format(fmt)
    acc, ops = acc_dtype(f), arithmetic_of(f)
    z = ops.matmul(x, w.T)  # (B, D_out) accumulated in acc (precision/arithmetic/: how)
    if b is not None:
        z = z + b.astype(acc, copy=False)  # bias joins before the one rounding, like a fused GEMM epilogue
    return rounded(z, f), (x,)


def linear_backward(dy: np.ndarray, cache: tuple, w: np.ndarray, fmt) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of y = x @ w.T + b: returns (dx (B, D_in), dw (D_out, D_in), db (D_out,)), all in fmt.

    `w` is passed in, not cached: the weights are fetched again for backward (ZeRO-3 re-gathers them).
    """
    f = get_format(fmt)
    acc, ops = acc_dtype(f), arithmetic_of(f)
    (x,) = cache
    dy_acc = dy.astype(acc, copy=False)  # (B, D_out)
    dx = rounded(ops.matmul(dy, w), f)  # (B, D_in)
    dw = rounded(ops.matmul(dy.T, x), f)  # (D_out, D_in)
    db = rounded(dy_acc.sum(axis=0, dtype=acc), f)  # (D_out,)
    return dx, dw, db


def linear_backward_ranks(dy: np.ndarray, cache: tuple, w: np.ndarray, fmt, n: int, out=None) -> tuple:
    """`linear_backward` for n ranks' micro-batches stacked row by row (models/_stacked.py): dy (n·B, D_out) and
    x (n·B, D_in), rank r's rows at [r·B, (r+1)·B); returns (dx (n·B, D_in), dw, db (n, D_out)), dw[r] rank r's
    (D_out, D_in). `out`: {"w": (n, D_out, D_in), "b": (n, D_out)} arrays in fmt's dtype (views of the ranks' packed
    gradients: models/_model.py `packed_ranks`), or for each a list of n arrays (each rank's own buffer), that dw and
    db are written into and returned as; where the product is already in fmt (fp32) the kernel writes each rank's dW
    there itself, else it is rounded and copied in.

    dx's rows are each their own dot products, made as one product (on the machine's sgemm, whose rows are not apart,
    as a stack of each rank's block: models/_stacked.py); dw and db sum over each rank's rows alone: 16-
    and 8-bit products and small fp32 ones as one batched product over the ranks' blocks (an (n, D_out, D_in) array),
    large fp32 ones rank by rank (a list), and each rank's column sums of its own (B, D_out) block in row order, as
    `linear_backward`'s `sum(axis=0)` adds them (tests/test_stacked_ranks.py: the same bits, rank by rank)."""
    f = get_format(fmt)
    acc, ops = acc_dtype(f), arithmetic_of(f)
    (x,) = cache
    dy_r, x_r = dy.reshape(n, -1, dy.shape[-1]), x.reshape(n, -1, x.shape[-1])  # (n, B, D_out), (n, B, D_in)
    # (n·B, D_in): one product where the kernels treat rows apart, else each rank's matrix its own (models/_stacked.py)
    dx = rounded(ops.matmul(dy, w) if ops.rows_apart else ops.matmul(dy_r, w).reshape(dy.shape[0], w.shape[1]), f)
    into = out["w"] if out is not None and f.dtype == acc else None  # the product is the gradient: made in place
    if dy_r[0].size + x_r[0].size < _BATCHED_BELOW or f.bits < 32:
        stack = into if type(into) is np.ndarray else None  # a list of each rank's array: copied in after
        dw = rounded(ops.matmul(dy_r.transpose(0, 2, 1), x_r, out=stack), f)  # (n, D_out, D_in)
    elif into is not None:
        for r in range(n):  # each rank's (D_out, D_in) into its row of the packed gradients
            ops.matmul(dy_r[r].T, x_r[r], out=into[r])
        dw = into
    else:
        dw = [rounded(ops.matmul(dy_r[r].T, x_r[r]), f) for r in range(n)]  # n × (D_out, D_in)
    db = rounded(dy_r.astype(acc, copy=False).sum(axis=1, dtype=acc), f)  # (n, D_out)
    if out is None:
        return dx, dw, db
    grads = written_into(out, {"w": dw, "b": db})
    return dx, grads["w"], grads["b"]


def written_into(out: dict | None, grads: dict) -> dict:
    """`grads` ({name: n ranks' arrays, rank r's at [r]}) with each one `out` names ({name: an (n, ...) array, or a
    list of each rank's array}: `Layer.backward_ranks`' `out`) copied there, rank by rank, and named by it instead
    (one made there already stays as it is); `grads` itself where there is no `out`."""
    if out is None:
        return grads
    for name, made in grads.items():
        if name in out and made is not out[name]:
            for r, into_r in enumerate(out[name]):  # rank r's (an (n, ...) array's row, or the list's array r)
                into_r[...] = made[r]
    return {name: out.get(name, made) for name, made in grads.items()}


# elements of one rank's dy and x below which fp32 dW are one batched product: where the portable kernel proves a
# product by one bound over whole operands (_exact_matmul.py `_WHOLE_FIRST`), for the whole stack at once. Above it
# each rank's own fp32 product (its norm bound is per product). 16- and 8-bit dW are batched at any size: the
# portable kernel reads every rank's facts in one pass and proves and rounds each rank's product in turn
# (_exact_matmul.py `_shortcut_each`; 919k parameters on 8 ranks: benchmarks/portable_step.py)
_BATCHED_BELOW = 1 << 14


def relu_forward(x: np.ndarray, fmt) -> tuple[np.ndarray, tuple]:
    """max(x, 0), exact in any format; returns (y, (x,))."""
    # NOTE: "<= 0", not "not > 0": NaN passes through (overflow stays visible)
    return _zeroed(x, x, fmt), (x,)


def relu_backward(dy: np.ndarray, cache: tuple, fmt) -> np.ndarray:
    """dy where x > 0, else 0 (the subgradient at 0 is taken as 0, as PyTorch does)."""
    (x,) = cache
    return _zeroed(dy, x, fmt)


def _zeroed(v, x, fmt):
    """v in fmt, +0 where x <= 0 (a new array; NaN in x keeps v). Where v and x are NumPy arrays already in a 16- or
    8-bit fmt, from their bits (`_nonpositive_bits`): x's signed integer view decides x <= 0 in two comparisons, and
    v's integer view times the 0/1 keep mask is v's pattern or +0's, the same bits as a copy of v with the mask's
    elements set to 0, in a quarter of the time of widening x and selecting (`np.where` on an ml_dtypes array is
    NumPy's slow generic loop: ~50 µs of a (512, 96) bf16 ReLU, four of them a step of benchmarks/yardstick.py's
    small case). Elsewhere (fp32, CuPy's arrays, a meta one, another format's v) the mask widened and a copy."""
    f = fmt if type(fmt) is Format else get_format(fmt)
    if type(v) is np.ndarray and v.dtype == f.dtype:
        bits = _nonpositive_bits(f.dtype) if type(x) is np.ndarray and x.dtype == f.dtype else None
        if bits is not None:
            signed, below = bits
            s = x.view(signed)
            keep = s > below  # x > 0 or NaN, or +0 (each NaN pattern lies above `below`)
            keep &= s != 0
            return np.multiply(v.view(signed), keep, dtype=signed).view(f.dtype)
        return np.where(x.astype(acc_dtype(f), copy=False) <= 0, np.zeros((), f.dtype), v)
    mask = x.astype(acc_dtype(f), copy=False) <= 0
    out = cast(v, f)
    out[mask] = 0
    return out


@functools.lru_cache(maxsize=None)
def _nonpositive_bits(dtype: np.dtype):
    """(signed integer dtype of dtype's width, t) such that x <= 0 exactly where x's signed view s is 0 or s <= t,
    for a 16- or 8-bit float dtype; None for any other dtype, or one whose patterns do not fall so. In a
    sign-magnitude format the negative patterns, seen as signed integers, run from -0 (the most negative integer)
    up through the negative values of growing magnitude to -inf, then the NaNs with the sign bit set (bf16, fp16,
    fp8_e5m2: exponent all ones; fp8_e4m3fn: 0xFF): t is the last non-NaN one. Found, and the rule checked, over
    every bit pattern of the dtype against its values widened to float64 (ml_dtypes' own conversion, exact), once
    per dtype: a format where it fails keeps the widened comparison (tests/test_layers.py reads every pattern)."""
    if dtype.itemsize not in (1, 2) or dtype.kind not in "fV":  # fp16; ml_dtypes' bf16 and fp8 (void kind)
        return None
    signed = np.dtype(f"int{dtype.itemsize * 8}")
    patterns = np.arange(np.iinfo(signed).min, np.iinfo(signed).max + 1, dtype=signed)  # every one, in order
    try:
        with np.errstate(invalid="ignore"):
            truth = patterns.view(dtype).astype(np.float64) <= 0  # NaN compares False
    except (TypeError, ValueError):  # a void dtype that is no number format
        return None
    negative = patterns[truth & (patterns != 0)]
    if not negative.size:
        return None
    below = int(negative.max())
    if not np.array_equal(truth, (patterns == 0) | (patterns <= below)):
        return None
    return signed, signed.type(below)


def _gelu_parts(x_acc: np.ndarray, f: Format) -> tuple[np.ndarray, np.ndarray]:
    """tanh(u) and du/dx for u = k (x + c x^3), in x_acc's dtype."""
    cube = x_acc * x_acc * x_acc  # NOTE: not x**3, which NumPy's SIMD-dispatched power rounds machine by machine
    t = arithmetic_of(f).tanh(GELU_K * (x_acc + GELU_C * cube))
    du = GELU_K * (1 + 3 * GELU_C * np.square(x_acc))
    return t, du


def gelu_forward(x: np.ndarray, fmt) -> tuple[np.ndarray, tuple]:
    """GELU, tanh form: 0.5 x (1 + tanh(k (x + c x^3))), computed in acc, rounded once to fmt."""
    x_acc = x.astype(acc_dtype(fmt))
    t, _ = _gelu_parts(x_acc, get_format(fmt))
    return cast(0.5 * x_acc * (1 + t), fmt), (x,)


def gelu_backward(dy: np.ndarray, cache: tuple, fmt) -> np.ndarray:
    """dy * d/dx [0.5 x (1 + t)] = dy * (0.5 (1 + t) + 0.5 x (1 - t^2) du/dx): the forward's own derivative."""
    (x,) = cache
    acc = acc_dtype(fmt)
    x_acc = x.astype(acc)
    t, du = _gelu_parts(x_acc, get_format(fmt))
    slope = 0.5 * (1 + t) + 0.5 * x_acc * (1 - t * t) * du
    return cast(dy.astype(acc) * slope, fmt)


# -- layers: what models and the driver hold ------------------------------------------------------

class Layer:
    """One op; its parameters are declared by name and shape, in the order they sit in the flat vector.

    forward(p, x, fmt) -> (y, cache);  backward(p, dy, cache, fmt) -> (dx, grads by name).
    `p` holds the layer's parameters in fmt ({} for parameter-free layers). A cache is a dict
    {name: array} of what backward needs, so the driver can account every saved byte by name.
    `flops(x_shape, kind)` counts the floating-point operations of "forward" or "backward" for an
    input of x_shape (a multiply-add counts 2), for the compute events the timeline reads.
    """

    name: str = "layer"
    saves_input_only: bool = True  # cache == {"input": x}: recomputation can rebuild it without running the layer
    # forward multiplies its input x, and backward its incoming dy, by its weights as they come: the kernels may
    # measure every rank's x or dy together before the op (`Arithmetic.prepare`, parallel/data/_compute.py)
    multiplies_input: bool = False
    # forward, and backward's dx, treat each row of x alone (a row's output depends on that row and the weights only)
    # and the cache holds arrays with x's rows: the ranks' micro-batches may run as one batch (models/_stacked.py),
    # where the arithmetic's products are rows apart too. A layer with weights then gives `backward_ranks` for the
    # weight gradients, which sum over each rank's rows.
    rows_apart: bool = False
    # `rows_apart` holds for activations of any rank, its rows the slices along axis 0 (a GPT's (B, L, d): each
    # sequence alone, attention and LayerNorm included); else for 2-D ones only (a Linear's backward transposes dy)
    rows_apart_nd: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("rows_apart"):  # what the declaration vouches for: these, not an override or a patch
            cls._rows_apart_for = (cls.forward, cls.backward, cls.backward_ranks)

    def stacks_rows(self) -> bool:
        """`rows_apart`, with forward and backward still the ones it was declared for: a subclass's override or a
        patched method (a test's injected failure, a learner's own backward) runs rank by rank."""
        cls = type(self)
        declared = getattr(cls, "_rows_apart_for", None)
        return (self.rows_apart and (cls.forward, cls.backward, cls.backward_ranks) == declared
                and not {"forward", "backward", "backward_ranks"} & self.__dict__.keys())

    def __init__(self, name: str):
        self.name = name
        self.param_shapes: dict[str, tuple] = {}

    def forward(self, p: dict, x: np.ndarray, fmt) -> tuple[np.ndarray, tuple]:
        raise NotImplementedError

    def backward(self, p: dict, dy: np.ndarray, cache: tuple, fmt) -> tuple[np.ndarray, dict]:
        raise NotImplementedError

    def backward_ranks(self, p: dict, dy, cache: dict, fmt, n: int, out: dict | None = None) -> tuple:
        """`backward` for n ranks' micro-batches stacked row by row (`rows_apart`): (dx with dy's rows, grads by name,
        each n ranks' arrays, rank r's at [r]). `out`: {name: (n, ...) array} the gradients may be written into (then
        they are those arrays; a layer that ignores it gives its own). A parameter-free layer's is `backward`
        itself."""
        if self.param_shapes:
            raise NotImplementedError(f"{type(self).__name__} has no backward for stacked ranks")
        return self.backward(p, dy, cache, fmt)

    def init(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Initial float32 parameters by name (none by default)."""
        return {}

    def flops(self, x_shape: tuple, kind: str) -> int:
        """Floating-point operations of one "forward" or "backward" on an input of `x_shape` (default 0)."""
        return 0

    def output_shape(self, x_shape: tuple) -> tuple:
        """The shape forward gives for an input of `x_shape` (default: the same; the meta twins read it)."""
        return tuple(x_shape)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}{v}" for k, v in self.param_shapes.items())
        return f"{type(self).__name__}({self.name!r}{', ' + shapes if shapes else ''})"


class Linear(Layer):
    """y = x @ w.T + b with w (D_out, D_in), b (D_out,) — bias optional (TinyNet's first layer has none)."""

    multiplies_input = True
    rows_apart = True

    def __init__(self, d_in: int, d_out: int, bias: bool = True, name: str = "linear"):
        super().__init__(name)
        self.d_in, self.d_out, self.bias = d_in, d_out, bias
        self.param_shapes = {"w": (d_out, d_in)}
        if bias:
            self.param_shapes["b"] = (d_out,)

    def forward(self, p, x, fmt):
        y, (x,) = linear_forward(x, p["w"], p.get("b"), fmt)
        return y, {"input": x}

    def backward(self, p, dy, cache, fmt):
        dx, dw, db = linear_backward(dy, (cache["input"],), p["w"], fmt)
        return dx, ({"w": dw, "b": db} if self.bias else {"w": dw})

    def backward_ranks(self, p, dy, cache, fmt, n, out=None):
        if dy.ndim != 2:  # (B, L, D) activations: linear_backward's dy.T is not the per-row transpose
            raise NotImplementedError("Linear stacks ranks of 2-D activations only")
        dx, dw, db = linear_backward_ranks(dy, (cache["input"],), p["w"], fmt, n, out)
        return dx, ({"w": dw, "b": db} if self.bias else {"w": dw})

    def flops(self, x_shape, kind):
        rows = math.prod(x_shape[:-1])  # B (or B*L tokens)
        product = 2 * rows * self.d_in * self.d_out  # x @ w.T: one multiply-add per (row, in, out)
        if kind == "forward":
            return product + (rows * self.d_out if self.bias else 0)
        return 2 * product + (rows * self.d_out if self.bias else 0)  # dx = dy @ w and dw = dy.T @ x; db sums dy

    def init(self, rng):
        # Scaled normal, Var(w) = 1/D_in, keeps activations O(1) through the depth; zero bias (as nanoGPT).
        out = {"w": (rng.standard_normal((self.d_out, self.d_in)) / math.sqrt(self.d_in)).astype(np.float32)}
        if self.bias:
            out["b"] = np.zeros(self.d_out, np.float32)
        return out


class ReLU(Layer):
    rows_apart = True  # elementwise

    def __init__(self, name: str = "relu"):
        super().__init__(name)

    def forward(self, p, x, fmt):
        y, (x,) = relu_forward(x, fmt)
        return y, {"input": x}

    def backward(self, p, dy, cache, fmt):
        return relu_backward(dy, (cache["input"],), fmt), {}

    def flops(self, x_shape, kind):
        return math.prod(x_shape)  # one comparison (forward) or one select (backward) per element


class GELU(Layer):
    """GELU in its tanh form (not erf); backward differentiates exactly that tanh form."""

    rows_apart = True  # elementwise

    def __init__(self, name: str = "gelu"):
        super().__init__(name)

    def forward(self, p, x, fmt):
        y, (x,) = gelu_forward(x, fmt)
        return y, {"input": x}

    def backward(self, p, dy, cache, fmt):
        return gelu_backward(dy, (cache["input"],), fmt), {}

    # tanh-form GELU per element: u = k(x + c x^3) is 4 ops, tanh ~ 1, 0.5 x (1 + t) is 3 (8 forward);
    # backward re-forms u and t and the slope 0.5(1+t) + 0.5 x (1 - t^2) du/dx, then dy * slope (~16).
    GELU_FLOPS = {"forward": 8, "backward": 16}

    def flops(self, x_shape, kind):
        return self.GELU_FLOPS[kind] * math.prod(x_shape)
