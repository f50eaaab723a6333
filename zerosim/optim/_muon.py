"""Muon, MomentUm Orthogonalized by Newton-Schulz (Keller Jordan, 2024): a matrix optimizer.

Muon replaces a weight matrix's momentum by (nearly) the orthogonal factor U V^T of its SVD U S V^T,
so every direction moves by about the same amount. It needs the whole matrix; under ZeRO stages 1-3 the
momentum and Nesterov input are formed on each rank's shard (elementwise) and only the orthogonalisation
sees whole matrices, which one of the ways of sharding in `zerosim.parallel.data.muon` brings together
(`sharding`: gather-everywhere, owner-per-matrix, Moonshot's Distributed Muon).

One `step_matrix`, in w.dtype (c(x): x formed in float64, rounded once to w.dtype):

    B = c(mu)*B + G                          # momentum, PyTorch convention (KellerJordan's original muon.py)
    U = G + c(mu)*B   (nesterov)   or   B    # Nesterov look-ahead, the reference's default
    O = newton_schulz(U)                     # ~ U V^T, see below (in `ns_dtype` when given)
    w = w * c(1 - lr*wd)                     # decoupled weight decay (a no-op for wd = 0)
    w = w - c(lr * max(1, rows/cols)**0.5) * O    # the reference's shape scaling of the update

NOTE: KellerJordan/Muon's muon.py today (857d1ad, `muon_update`) keeps the momentum as an average,
momentum.lerp_(grad, 1 - beta), and its Nesterov input as grad.lerp_(momentum, beta); Moonlight's toy_train.py
(c2ad5b2, `Muon.step`) and "Muon is Scalable" (arXiv 2502.16982, eq. 1) keep B = mu*B + G as here. The two differ
by the factor 1 - beta, which Newton-Schulz's normalisation removes up to rounding; zerosim keeps the second.

Newton-Schulz: X = U/(||U||_F + 1e-7) (so every singular value is <= 1), then `ns_steps` times
A = X X^T;  X = a X + (b A + c A A) X.  Acting on singular values this is the odd polynomial
f(s) = a s + b s^3 + c s^5. The default is the quintic (3.4445, -4.7750, 2.0315) of KellerJordan's
muon.py, tuned for a steep slope at 0: after 5 steps the singular values are not 1 but land in
roughly [0.7, 1.2], which the reference accepts. (1.5, -0.5, 0) is seed 001's cubic, which does
converge to 1 but needs many more steps for small singular values. Like the reference we iterate on
the wide orientation (X X^T is the smaller Gram matrix). By default we compute in w.dtype; `ns_dtype="bf16"` is
the reference's `X = G.bfloat16()` (KellerJordan's muon.py `zeropower_via_newtonschulz5`; DeepSpeed 0.19.5's
`zeropower_via_newtonschulz5` where the accelerator has bf16; torchtitan's DistMuon): U rounded once to bf16,
every product rounded to bf16, and O widened exactly before the scaling.
Each matrix product is the exact dot products rounded once to fp32 (precision/arithmetic/ `exact_matmul`, and
`exact_gram` for X X^T and A A^T: the same bits on every BLAS), then to the working dtype; float64 input (the
yardstick) takes NumPy's dgemm. The Frobenius norm is accumulated in fp32 (float64 for float64 input).

`MuonAdamW` is the split the reference runs (KellerJordan's muon.py `MuonWithAuxAdam`; DeepSpeed's
`set_optimizer_flags`): 2-D hidden matrices on Muon; embeddings, the head, norms and biases on AdamW.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.optim._adam import AdamW
from zerosim.optim._base import Optimizer, _is_real, check_nonneg, check_step_args, scalar
from zerosim.precision import cast, get_format
from zerosim.precision import arithmetic
from zerosim.precision.arithmetic import exact_matmul

QUINTIC = (3.4445, -4.7750, 2.0315)  # KellerJordan's muon.py
CUBIC = (1.5, -0.5, 0.0)  # seed 001: X <- 3/2 X - 1/2 X X^T X
# How the ranks bring whole matrices together under ZeRO stages 1-3: the records (who gathers, who computes, who
# receives) are zerosim.parallel.data.muon.MUON_PLANS, keyed by these names (a test holds the two lists equal).
SHARDINGS = ("gather", "owner", "round_robin", "distributed")
# Names of parameters the reference keeps on AdamW although they are 2-D: DeepSpeed 0.19.5 deepspeed/__init__.py
# `set_optimizer_flags` tests "embed" and "lm_head"; zerosim's GPT calls its embeddings wte/wpe and its head w_head.
AUX_NAMES = ("embed", "head", "wte", "wpe")


def newton_schulz(g2d: np.ndarray, steps: int = 5, coefficients: tuple = QUINTIC) -> np.ndarray:
    """Approximately orthogonalise a matrix: G = U S V^T  ->  U f^steps(S/||G||_F) V^T, in g2d.dtype."""
    dt = g2d.dtype
    a, b, c = (scalar(x, dt) for x in coefficients)
    tall = g2d.shape[0] > g2d.shape[1]
    x = g2d.T if tall else g2d  # (r, k) with r <= k
    acc = np.float64 if dt == np.float64 else np.float32  # norm accumulator (a GPU reduction's fp32)
    norm = float(np.sqrt(np.sum(np.square(x, dtype=acc), dtype=acc)))
    x = x / scalar(norm + 1e-7, dt)  # + 1e-7 as the reference: a zero matrix stays zero

    def mm(p, q):  # each product exact, summed exactly, rounded once to fp32 and then to the working dtype
        if dt == np.float64:  # the fp64 yardstick: NumPy's dgemm, compared within tolerances, never pinned
            return p @ q
        return exact_matmul(p, q).astype(dt, copy=False)  # the same bits on every BLAS (precision/arithmetic/)

    def gram_of(p):  # mm(p, p.T): a BLAS forms it in half the FLOPs (syrk), each mirrored pair settled once
        # (exact_gram, looked up on first use: a first script that never steps Muon does not load it)
        return p @ p.T if dt == np.float64 else arithmetic.exact_gram(p).astype(dt, copy=False)

    for _ in range(steps):
        gram = gram_of(x)  # (r, r): needs whole rows of x, the reason ZeRO-2/3 cannot shard this
        # gram is exactly symmetric (each element its exact sum, rounded once), so gram @ gram is gram @ gram.T,
        # bit for bit: a Gram matrix too
        x = a * x + mm(b * gram + c * gram_of(gram), x)
    return x.T if tall else x


@dataclass(frozen=True)
class Muon(Optimizer):
    """Muon for one whole weight matrix at a time: call `step_matrix`, never `step`.

    State "b" (momentum), 4 bytes/param in fp32. It may be allocated flat by `init_state` and passed
    flat to `step_matrix`, which views it with the matrix's shape. Use an elementwise optimizer
    (AdamW in the reference) for biases, norms and embeddings.
    `record` keys: "b", "u" (the matrix orthogonalised), "o" (its Newton-Schulz output), "update".
    """

    lr: float = 0.02  # the reference's default
    momentum: float = 0.95  # mu, the reference's default
    nesterov: bool = True  # the reference's default
    ns_steps: int = 5  # Newton-Schulz iterations, as the reference
    ns_coefficients: tuple = QUINTIC  # (a, b, c) of f(s) = a s + b s^3 + c s^5; CUBIC for seed 001's
    weight_decay: float = 0.0  # decoupled, applied before the update as in the reference
    ns_dtype: str | None = None  # Newton-Schulz's format: None = w.dtype; "bf16" = the reference's X = G.bfloat16()
    sharding: str = "gather"  # under ZeRO 1-3: one of SHARDINGS (zerosim.parallel.data.muon.MUON_PLANS)
    gather: str | None = None  # the wire format of the gathered Nesterov input: None = the state's (exact);
    #                            "bf16" = Moonshot's ("Muon is Scalable" 2.3: "2 (bf16 Muon gather)")

    name = "muon"
    state_names = ("b",)
    matrix_state_names = ("b",)  # what step_matrix reads: the momentum
    elementwise = False
    allowed_stages = (0, 1, 2, 3)
    why_not_sharded = (
        "Muon orthogonalises each whole weight matrix with Newton-Schulz iterations, and every iteration "
        "forms X X^T, which needs complete rows of the (momentum-smoothed) gradient matrix. ZeRO stages 1-3 "
        "shard the optimizer state (2 and 3 the gradient too) into slices across ranks, so before Newton-Schulz "
        "the ranks bring each whole matrix together: every rank gathers it, or one owner does, or the ranks "
        "sharing it do (Moonshot's Distributed Muon). zerosim.parallel.data.muon has the three as plans."
    )

    def __post_init__(self):
        check_nonneg(self.lr, "lr")
        check_nonneg(self.weight_decay, "weight_decay")
        if not (0 <= self.momentum < 1):
            raise ValueError(f"momentum must lie in [0, 1), got {self.momentum!r}")
        if not isinstance(self.nesterov, bool):  # bool("no") is True: a string is refused, not read as yes
            raise ValueError(f"nesterov must be True or False, got {self.nesterov!r}")
        if isinstance(self.ns_steps, bool) or not isinstance(self.ns_steps, int) or not 0 <= self.ns_steps <= 1000:
            # each iteration is three matrix products on every matrix, every step; the reference runs 5, and past a
            # few dozen the iteration has long stopped moving (10^30 of them ran for ever)
            raise ValueError(f"ns_steps must be an integer in [0, 1000], got {self.ns_steps!r}")
        if not (isinstance(self.ns_coefficients, (tuple, list)) and len(self.ns_coefficients) == 3):
            raise ValueError(f"ns_coefficients must be (a, b, c), got {self.ns_coefficients!r}")
        if not all(_is_real(x) and math.isfinite(x) for x in self.ns_coefficients):  # a NaN turns every master NaN
            raise ValueError(f"ns_coefficients must be three finite numbers (a, b, c), got {self.ns_coefficients!r}")
        object.__setattr__(self, "ns_coefficients", tuple(float(x) for x in self.ns_coefficients))
        for field_name in ("ns_dtype", "gather"):
            value = getattr(self, field_name)
            if value is not None:
                get_format(value)  # a clear error naming the known formats
        if self.sharding not in SHARDINGS:
            raise ValueError(f"unknown Muon sharding {self.sharding!r}; choose one of {SHARDINGS}")

    def is_matrix(self, name: str, shape) -> bool:
        """Whether Muon steps this parameter as a matrix: every one here (a 1-D one as a 1 x n matrix, for which
        Newton-Schulz just normalises the vector); MuonAdamW keeps the reference's split."""
        return True

    def step(self, w, g, state, t, record=None):
        """Refused: Muon needs whole matrices. Use `step_matrix(w2d, g2d, state, t)`."""
        raise TypeError(
            "Muon is not elementwise: it orthogonalises whole weight matrices, so it cannot step a flat "
            "array or shard. Call step_matrix(w2d, g2d, state, t) with the full (rows, cols) matrix, and "
            "use an elementwise optimizer (e.g. AdamW) for 1-D parameters."
        )

    def step_matrix(self, w2d: np.ndarray, g2d: np.ndarray, state: dict, t: int, record: dict | None = None) -> None:
        """Update the full matrix `w2d` (and the momentum in `state`) in place from its gradient `g2d`."""
        if not (isinstance(w2d, np.ndarray) and w2d.ndim == 2):
            raise ValueError(f"step_matrix needs a 2-D weight matrix, got {getattr(w2d, 'shape', type(w2d).__name__)}")
        state = {k: _as_matrix(v, w2d.shape) for k, v in state.items()} if isinstance(state, dict) else state
        s = check_step_args(w2d, g2d, state, self.matrix_state_names, t)
        b = s["b"]
        self.momentum_(b, g2d)
        update, u, o = self.direction(g2d, b)
        self.apply_(w2d, update)
        if record is not None:
            record.update(b=b.copy(), u=u, o=o, update=update)

    # The three parts of step_matrix, for ZeRO-1 (zero/stage1.py): the momentum and the final update are
    # elementwise, so each rank does its own shard; only `direction` needs the whole matrix.
    def momentum_(self, b: np.ndarray, g: np.ndarray) -> None:
        """b = mu*b + g in place (elementwise)."""
        mu = scalar(self.momentum, b.dtype)
        b *= mu
        b += g

    def direction(self, g2d: np.ndarray, b2d: np.ndarray) -> tuple:
        """(update, u, o) for one whole matrix: u = g + mu*b (Nesterov) or b, o = NS(u), update = c*o."""
        u = self.nesterov_input(g2d, b2d)
        update, o = self.orthogonalised(u)
        return update, u, o

    def nesterov_input(self, g: np.ndarray, b: np.ndarray) -> np.ndarray:
        """u = g + mu*b (Nesterov) or a copy of b: elementwise, so each rank forms it on its shard (Moonshot's g')."""
        return g + scalar(self.momentum, g.dtype) * b if self.nesterov else b.copy()

    def orthogonalised(self, u2d: np.ndarray) -> tuple:
        """(update, o) for one whole matrix u: o = NS(u) in `ns_dtype`, widened back to u's dtype (exact), and
        update = c(lr * max(1, rows/cols)**0.5) * o."""
        dt, (rows, cols) = u2d.dtype, u2d.shape
        x = u2d if self.ns_dtype is None else cast(u2d, get_format(self.ns_dtype))
        o = newton_schulz(x, self.ns_steps, self.ns_coefficients).astype(dt, copy=False)
        return scalar(self.lr * max(1.0, rows / cols) ** 0.5, dt) * o, o

    def apply_(self, w: np.ndarray, update: np.ndarray) -> None:
        """w = w*(1 - lr*wd) - update in place (elementwise)."""
        w *= scalar(1.0 - self.lr * self.weight_decay, w.dtype)
        w -= update


@dataclass(frozen=True)
class MuonAdamW(Muon):
    """Muon on the 2-D hidden matrices, AdamW on the rest, as the reference splits them (KellerJordan/Muon 857d1ad
    muon.py `MuonWithAuxAdam`: hidden matrices on Muon, embeddings, head and scalars (norms, biases) on Adam;
    DeepSpeed 0.19.5 `set_optimizer_flags`: `p.ndim >= 2` and no "embed" / "lm_head" in the name).

    State: "b" is Muon's momentum for a matrix and AdamW's first moment m for the others; "v" is AdamW's second
    moment. NOTE: zerosim's state buffers cover a rank's whole region, so "v" is held (and stays 0) for Muon's
    elements too: 8 bytes a parameter in the ledgers, where DeepSpeed's per-group flat buffers hold 4 for Muon's
    (its optimizer state per parameter group); `zerosim.analysis.costs` counts the split as DeepSpeed holds it.
    The AdamW steps zerosim's AdamW (torch's order, `formula="seed"` by default), not KellerJordan's muon.py
    `adam_update` (lerp_ and a bias-corrected quotient): the split is the reference's, the AdamW arithmetic zerosim's.
    """

    adam_lr: float = 3e-4  # KellerJordan's muon.py MuonWithAuxAdam's defaults for the Adam groups
    adam_betas: tuple = (0.9, 0.95)
    adam_eps: float = 1e-10
    adam_weight_decay: float = 0.0

    name = "muon_adamw"
    state_names = ("b", "v")

    def __post_init__(self):
        super().__post_init__()
        self.aux  # checks the AdamW hyperparameters now

    @property
    def aux(self) -> AdamW:
        """The AdamW the non-matrix parameters step with (its state: m = this optimizer's "b", v = "v")."""
        return AdamW(lr=self.adam_lr, betas=self.adam_betas, eps=self.adam_eps, weight_decay=self.adam_weight_decay)

    def is_matrix(self, name: str, shape) -> bool:
        return len(shape) == 2 and not any(word in name.lower() for word in AUX_NAMES)

    def step_aux(self, w, g, state: dict, t: int) -> None:
        """AdamW on a non-matrix parameter's elements (any slice of them: elementwise)."""
        self.aux.step(w, g, {"m": state["b"], "v": state["v"]}, t)


def _as_matrix(a, shape):
    """A flat state buffer (or Buffer) viewed as `shape` without copying; anything else unchanged."""
    a = a.array if hasattr(a, "array") else a
    if isinstance(a, np.ndarray) and a.ndim == 1 and a.size == shape[0] * shape[1]:
        if not a.flags.c_contiguous:  # its reshape would be a copy, which the updates would not reach
            raise ValueError(f"a state buffer of stride {a.strides[0]} B cannot be viewed as {shape} without a copy")
        return a.reshape(shape)  # a view: NumPy reshapes a contiguous array without copying (setting .shape, which
        # said so by raising, is deprecated since NumPy 2.5)
    return a
