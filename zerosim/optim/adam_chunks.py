"""Adam's "seed" step in cache-sized chunks: the same roundings in the same order, element for element.

`Adam._update` (adam.py) writes the seed's formula as whole-shard NumPy expressions: every operation
makes a temporary the size of the shard (nine of them, 10 MB each for a 2.5M-element fp32 shard) and
every pass goes out to memory and back. Here the same operations run on one chunk of CHUNK elements
at a time, into two scratch arrays (`out=`), so a chunk's m, v, g, w and temporaries stay in the cache:
in a 10M-parameter fp32 step on 4 ranks the update took 3x less CPU (benchmarks/peers.py).

Bits: Adam is elementwise (element i's new m, v, w read only element i's m, v, g, w), so cutting the
shard into chunks changes no element's arithmetic; each NumPy ufunc rounds its result once into the
output's dtype whether that output is a new array or a given one (`out=`), and `scalar` gives the
same rounded coefficients as adam.py. Each line below is one line of `Adam._update`'s seed branch:

    m *= c(b1);  a = c(1-b1) * g;  m += a                    m = c(b1)*m + c(1-b1)*g
    v *= c(b2);  a = g * g;  a = c(1-b2) * a;  v += a        v = c(b2)*v + c(1-b2)*(g*g)
    a = m / c(1-b1**t);  b = v / c(1-b2**t)                  m_hat, v_hat
    b = sqrt(b);  b = b + c(eps);  a = c(lr) * a;  a = a / b  update = (c(lr)*m_hat) / (sqrt(v_hat) + c(eps))
    w -= a                                                    w = w - update

tests/test_adam_chunks.py checks it against `Adam._update`'s whole-shard expressions (the naive twin,
which still runs whenever intermediates are recorded) on every chunk boundary case, bit for bit.
"""

from __future__ import annotations

import numpy as np

from zerosim.optim.base import scalar

CHUNK = 1 << 15  # elements per chunk: 32768 fp32 = 128 KiB an array, six arrays within a 1 MiB L2


def applies(w, g, state: dict) -> bool:
    """True when the chunked step can run: plain contiguous 1-D NumPy arrays of one native float dtype (the
    meta backend's data-less arrays, CuPy's and ml_dtypes' formats take the whole-shard expressions)."""
    arrays = (w, g, *state.values())
    return all(type(a) is np.ndarray and a.ndim == 1 and a.flags.c_contiguous and a.dtype == w.dtype
               for a in arrays) and w.dtype in (np.float32, np.float64)


def seed_step(betas: tuple, lr: float, eps: float, w: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray,
              t: int) -> None:
    """w, m, v updated in place as `Adam._update`'s seed branch does (module docstring), CHUNK elements at a
    time. w, g, m, v: (n,) arrays of one dtype (`applies`)."""
    dt = w.dtype
    b1, b2 = betas
    c_b1, c_1b1, c_b2, c_1b2 = scalar(b1, dt), scalar(1.0 - b1, dt), scalar(b2, dt), scalar(1.0 - b2, dt)
    c_bc1, c_bc2 = scalar(1.0 - b1**t, dt), scalar(1.0 - b2**t, dt)
    c_lr, c_eps = scalar(lr, dt), scalar(eps, dt)
    n = w.shape[0]
    scratch_a, scratch_b = np.empty(min(n, CHUNK), dt), np.empty(min(n, CHUNK), dt)  # (chunk,) temporaries
    for lo in range(0, n, CHUNK):
        hi = min(lo + CHUNK, n)
        mm, vv, gg, ww = m[lo:hi], v[lo:hi], g[lo:hi], w[lo:hi]
        a, b = scratch_a[: hi - lo], scratch_b[: hi - lo]
        mm *= c_b1
        np.multiply(c_1b1, gg, out=a)
        mm += a
        vv *= c_b2
        np.multiply(gg, gg, out=a)
        np.multiply(c_1b2, a, out=a)
        vv += a
        np.divide(mm, c_bc1, out=a)  # m_hat
        np.divide(vv, c_bc2, out=b)  # v_hat
        np.sqrt(b, out=b)
        np.add(b, c_eps, out=b)  # the denominator
        np.multiply(c_lr, a, out=a)
        np.divide(a, b, out=a)  # the update
        ww -= a
