"""How far each gradient recipe's average lands from the exact one, as the number of ranks N grows.

Every rank holds a gradient in the compute format; each recipe (parallel/data/recipes/_averaging.py) reduces them in the
ring's order with its own divisions and roundings and hands the optimizer an fp32 average. The exact
average is taken in float64 from the same 16-bit inputs (each exact in float64, their sum of at most
a few thousand terms exact to ~2**-40 relative here). A ring sum of N terms rounds N-1 times in the
wire format, each time at the size of the partial sum: for gradients of random sign that size grows
like √k, so the error of the average, measured against the average's own size, grows like √N (the
seeds' protocol in fp16); dividing first keeps the partial sums small but rounds each term; an fp32
wire leaves one rounding.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.collectives import naive_reduce
from zerosim.parallel.data import recipes as averaging  # averaging's one place (recipes/_averaging.py), by its face
from zerosim.precision import MixedPrecision, cast, get_format


@dataclass(frozen=True)
class RecipeError:
    """One recipe at one N: its error against the float64 average, over `length` elements."""

    label: str
    n: int
    rms: float  # sqrt(mean((g - exact)^2)) / sqrt(mean(exact^2)): the error relative to the average's size
    worst: float  # max |g - exact| / sqrt(mean(exact^2))


def rank_gradients(n: int, length: int, fmt, seed: int = 0, mean: float = 0.0) -> list:
    """N gradients of `length` elements in `fmt`: standard normal values (+ `mean`), each rounded once."""
    rng = np.random.default_rng([seed, n, length])
    return [cast(rng.standard_normal(length) + mean, get_format(fmt)) for _ in range(n)]


def recipe_average(grads: list, policy: MixedPrecision) -> np.ndarray:
    """The fp32 average the policy's recipe hands the optimizer (K = 1, S = 1), in the ring's order: NumPy's adds
    in the wire dtype, the same bits as the oracle's exact adds rounded once (tests/test_collectives_ring.py) at a
    fiftieth of the time (notebook 06 reduces 2,048 elements over up to 192 ranks for seven recipes)."""
    n = len(grads)
    reduced = naive_reduce(grads, op=averaging.reduce_op(policy, n), wire=policy.reduce_format, order="ring-native")
    return averaging.finish(averaging.after_reduce(reduced, policy, n), policy, n)


def recipe_errors(policies: dict, ns, length: int = 4096, seed: int = 0, mean: float = 0.0) -> list:
    """[RecipeError] for each labelled policy {label: MixedPrecision} at each N in `ns`, the same inputs for all."""
    out = []
    for n in ns:
        by_format = {}
        for label, policy in policies.items():
            fmt = policy.compute_format.name
            if fmt not in by_format:
                grads = rank_gradients(n, length, fmt, seed, mean)
                exact = np.sum([g.astype(np.float64) for g in grads], axis=0) / n
                by_format[fmt] = (grads, exact, np.sqrt(np.mean(exact**2)))
            grads, exact, size = by_format[fmt]
            err = recipe_average(grads, policy).astype(np.float64) - exact
            out.append(RecipeError(label, n, float(np.sqrt(np.mean(err**2)) / size), float(np.max(np.abs(err)) / size)))
    return out
