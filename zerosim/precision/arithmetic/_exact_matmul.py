"""Matrix products whose bits do not depend on the machine: each element the exact dot product, rounded once.

Letters: M rows, K the summed dimension, N columns; a (..., M, K), b (..., K, N), leading (batch) dims broadcast.

Why a BLAS product depends on the machine: sgemm sums each element's K products in an order of its kernel's
choosing (the register tile, AVX2 or AVX-512 or NEON lanes, K cut into blocks), and fp32 rounds after every add.
OpenBLAS's SkylakeX and Prescott kernels give other bits than its Haswell kernel in 16 % and 77 % of the elements
of 300 random fp32 products (benchmarks/portable_numbers.py); MKL, Accelerate and cuBLAS have orders of their own.

`exact_matmul` gives the same bits everywhere, in three steps:

1. Widen a and b to float64 and let the machine's dgemm form c = a @ b, in whatever order it likes. A product of
   two fp32 (or 16- or 8-bit) numbers is exact in float64 (24 + 24 significant bits <= 53; exponents far inside
   float64's range), so only the K - 1 adds round, and for any order, with or without FMA,
   |c - s| <= γ(K-1)·Σ_k |a_ik·b_kj|, where s is the exact sum, γ(n) = n·u / (1 - n·u), u = 2**-53 (Higham,
   "Accuracy and Stability of Numerical Algorithms", 2nd ed., §3.1); a second dgemm, |a| @ |b|, gives the sum of
   magnitudes. `_ERROR_PER_TERM` overstates γ twice over, which also covers that dgemm's own rounding. Where every
   product is a whole multiple of one power of two q (q_i·q_j: a's row and b's column, from their smallest
   elements and their format's precision) and Σ|a_ik·b_kj| < 2**53·q, every partial sum is a float64 and c = s
   exactly, in any order: 16-bit inputs mostly are, and there an exact float32 midpoint is a true tie.
2. Round c to float32 where c ± err round alike (_round_once.py `certain_f32`: rounding is monotone, so s rounds
   there too). That is every element but those whose exact value lies within err of a float32 rounding boundary:
   about K·2**-27 of the elements of well-conditioned data, more where the sum cancels.
3. Sum those few ("suspects") exactly on the host: `math.fsum` (Shewchuk's algorithm) gives s rounded once to
   float64, which rounds on to float32 correctly unless it is itself a float32 midpoint (float32's midpoints are
   float64 numbers, so only there can the second rounding go wrong); then the exact rational sum decides.

fp32 operands on the host skip step 1's second dgemm: Cauchy–Schwarz bounds Σ_k |a_ik·b_kj| by ||a_i||·||b_j||, a pass
over each operand (_norm_bound.py), and the few elements that bound leaves in doubt get their own sum of magnitudes,
then sums twice as precise for all of them at once (_twice_precise.py), before any is summed one by one (a handful
are summed one by one at once: `_settle_by_magnitudes`).

Shortcuts before steps 1-3, on the host for 16- and 8-bit inputs (`_narrow_product`): the exactness condition of
step 1 shown for every element at once, from facts read off the operands' bits (_extents.py: the largest magnitude
and the quantum), no second GEMM. A small product: one bound over each whole operand, else the long way (for a few
thousand elements its second GEMM costs less than facts by rows and columns), where the whole operands' quanta
settle most suspects before any per-row pass (`_exact_by_whole_quanta`). A larger one: a bound by rows and columns
(Σ|a_ik| and max|b_kj| over the quanta, `_shortcut`), where the few elements it leaves unsure (up to one in 16, found
among the candidate rows and columns by a mask or a sorted search, `_unsure_sorted`) are settled one by one (`_settle`);
past that one GEMM whose error the norms bound, its suspects settled alike (`_narrow_by_norms`: a 10M MLP's wide
products, where the long way took three GEMMs), and the long way only where those are many too; K·max|a_ik| in place of
Σ|a_ik| first, from the facts alone (`_rows_hold`: most of a ZeRO step's dW pass it, and skip a pass over a). A batch of
products, one each (the ranks' dW), is proved from facts read once for all and rounded product by product
(`_shortcut_each`), each element as its product alone would be. fp32 products skip the bound by rows and columns: 48
significant bits leave it no room. A large operand's float64 copy and facts are kept across products (_operand_cache.py:
the ranks of a ZeRO step multiply by the same gathered weights). The same bits on every path
(tests/test_exact_matmul_bound.py, tests/test_exact_matmul_facts.py); benchmarks/yardstick.py has what each costs.

So every element is s rounded to nearest-even float32, whichever BLAS, kernel, thread count or device formed c.
An exact zero is +0 (a GEMM starts its accumulator at +0; a sum's sign of zero would otherwise depend on the
order); a NaN (from a NaN or inf input) is the canonical one (_nan.py: its sign and payload would otherwise depend
on the BLAS and the CPU). What it assumes: a dgemm that forms each element as a sum of its K products in some order
(every BLAS in use; none applies Strassen's algorithm to dgemm) and IEEE-754 float64 arithmetic, rounding to
nearest. float64 inputs (zerosim's fp64 yardstick) go to the machine's dgemm as they are: their products are not
exact.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.precision.arithmetic import _rank_products as rank_products
from zerosim.precision.arithmetic._extents import narrow_host, whole_bound_holds
from zerosim.precision.arithmetic._nan import CANONICAL_NAN, canonical_nans
from zerosim.precision.arithmetic._operand_cache import kept_extent, operand, operand_once
from zerosim.precision.arithmetic._round_once import certain_f32, f32_of_fraction, narrow32, widen64
from zerosim.precision.arithmetic._scratch import scratch
from zerosim.precision.arithmetic._twice_precise import gathered_rows, twice_precise_sums
from zerosim.precision.cast import NUMPY, has_values, namespace_of

# γ(K-1) <= (K - 1)·u·(1 + 2**-40) for any K a machine can hold; (K + 2)·2u over-states it at least twice, which also
# covers the relative rounding error (<= γ(K)) of computing Σ|a_ik·b_kj| itself by a dgemm
_ERROR_PER_TERM = 2.0**-52
# where Σ|a_ik·b_kj| is summed from the K exact products themselves (`_settle_by_magnitudes`), with no margin: the
# computed sum S' >= S·(1 - γ(K-1)), so (K' + 2)·u·S'·(1 + 2**-20) >= γ(K'-1)·S plus the roundings of the bound and
# of certain_f32's y ± err, for any K' <= K under 2**31 (three units of u to spare, and the factor for the K·u excess
# of γ and of 1/(1 - γ(K-1))); K' the terms c errs as (_norm_bound.py `summed_terms`)
_SUMMED_PER_TERM = 2.0**-53 * (1 + 2.0**-20)
# `_repair`: below this many products (plus 100 a sum, its list's own cost) the elements are summed one by one, not
# by the tree first: the tree's ~20 NumPy calls cost ~100 µs, one exact sum ~3.5 µs and 35 ns a product (2-core AMD
# EPYC); a 919k MLP's step leaves 1-5 at K = 32 in each of 24 dW. Either way the same bits
_ONE_BY_ONE = 3500
_WHOLE_FIRST = 1 << 14  # elements of a and b together: below this, one bound over the whole is tried first
_F32_TINIEST = 2.0**-149  # float32's smallest subnormal: a nonzero sum at least this large rounds to a nonzero
_ABOVE_ALL = 2.0**1000  # above every |value| of a format of 32 bits or fewer (float32's largest is below 2**128)
# binades of spread (a row's largest over its smallest nonzero, times a column's) below which data rarely comes: the
# bound by rows and columns is tried only where it leaves that much room (fp32 x fp32: never; its failed attempt
# cost more than the long way, 60 % of an fp32 product in notebook 11). Which path runs never changes a bit.
_SPAN_FOR_REAL_DATA = 4
_BLOCK = 1 << 15  # candidate elements `_unsure_sorted` masks whole; past this it sorts and searches
# elements of c that a stack of small products makes and rounds at once, whole products each (`_shortcut_each`):
# 120 kB of float64, in the core's own cache. benchmarks/yardstick.py's 10k MLP on 64 ranks: its three stacked dW
# 2.0 -> 1.0-1.2 ms (bf16 operands of its shapes, in turns); at 2**16 and up, 2.3-2.5 ms (out of cache)
_PRODUCTS_AT_ONCE = 15 << 10
# _scratch.py's buffers a narrow product's own float64 temporaries go in: its operands' copies where they are not kept
# (Operand.wide_in) and a 2-D product's c (`_shortcut`); 8 holds `_shortcut_stacked`'s groups; none of them is taken
# by anything a narrow product calls
_A_SLOT, _B_SLOT, _C_SLOT = 9, 10, 11
_LONG_WAY_ELEMENTS = 1 << 13  # elements of a stacked product's output the long way makes at once (~40 B each)
# float64 elements of c `_shortcut_each` makes and rounds at a time (2 MB): a block still in cache as it is rounded.
# Rounding a whole (512, 1024) c of a ZeRO step's dW (4 MB) read it back from memory: the layer's 8 ranks' dW took
# 10.7 ms against 8.2 in blocks, 6.3 for the GEMMs alone (random bf16 of its shapes, in turns, loaded 2-core EPYC)
_ROUNDED_AT_ONCE = 1 << 18


def exact_matmul(a, b, out=None):
    """a (..., M, K) @ b (..., K, N) as float32 (..., M, N): each element the exact sum of its K products,
    rounded once to nearest-even float32 (+0 for an exact zero), the same bits on every machine.

    a and b hold fp32, fp16, bf16 or fp8 values, in their own dtype or widened to float32 (any dtype whose products
    are exact in float64). Meta arrays (no values) give the product's float32 shape; float64 inputs the machine's
    float64 product. Where every rank multiplies by the same b, one stacked product serves them all
    (_rank_products.py: the same bits).

    `out`: a host array of the product's shape and dtype to hold it, returned (any strides; say, a rank's dW inside
    the ranks' packed gradients, models/layers/_basic.py). The fp32 operands' bound by the norms writes its rounded
    sums there as it makes them; every other path makes its answer and copies it in. The same bits either way
    (tests/test_exact_matmul_out.py).
    """
    if out is not None:
        _check_out(a, b, out)
    found = rank_products.take(a, b, _exact_once)  # a block of a stacked product finite everywhere, or None
    found = _exact_alone(a, b, out=out) if found is None else found
    if out is None or found is out:
        return found
    np.copyto(out, found)
    return out


def _check_out(a, b, out) -> None:
    """A ValueError where `out` cannot hold a @ b as it is: another shape, or another dtype than the product's."""
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    dtype = np.float64 if np.float64 in (a.dtype, b.dtype) else np.float32
    if type(out) is not np.ndarray or out.shape != shape or out.dtype != dtype:
        raise ValueError(f"exact_matmul: out must be a {np.dtype(dtype)} array of shape {shape}, got "
                         f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}")


def _exact_once(a, b):
    """exact_matmul(a, b) where `a` was made for this product alone (the ranks' operands stacked:
    _rank_products.py): a large `a`'s float64 copy and facts are not kept for later products, which would never
    find them (a small one's extent is, as the long way reads it again)."""
    return _exact_alone(a, b, once=True)


def _exact_alone(a, b, once: bool = False, out=None):
    """exact_matmul(a, b), made for this product alone, into `out` where the path allows (else fresh); `once`: a is
    used by no other product (`_exact_once`). NaN in, one NaN out (_nan.py), but for what `_narrow_product` and
    the bound by the norms (`_exact_long`) answer: they answer only where every value is finite, and a finite GEMM's
    sums hold no NaN (a look for one is a pass over the output: 1 ms of a 919k step on 8 ranks, whose dW are 29 MB)."""
    if narrow_host(a) and narrow_host(b):  # plain host arrays of 16- or 8-bit formats, what models multiply
        made = _narrow_product(a, b, once)
        if made is not None:
            return made
        m, n = a.shape[-2], b.shape[-1]
        if a.ndim == 3 and a.shape[0] > 1 and a.shape[0] * m * n > _LONG_WAY_ELEMENTS:
            # the long way's float64 temporaries (c, |a| @ |b|, its bound, y ± err: ~40 B an element) a few of the
            # stacked products at a time: each element's bits are its own, whichever products it is made beside (a
            # hand-built Cluster(8)'s ranks' dW all at once lifted its peak RSS 1.8 MB, 4.7x its ledgers' peak)
            at = max(1, _LONG_WAY_ELEMENTS // max(1, m * n))
            stacked_b = b.ndim == 3 and b.shape[0] == a.shape[0]
            return np.concatenate([_exact_alone(a[i:i + at], b[i:i + at] if stacked_b else b, once)
                                   for i in range(0, a.shape[0], at)])
    made, nan_free = _exact_long(a, b, out)
    return made if nan_free or not has_values(made) else canonical_nans(made, namespace_of(made))


def _exact_long(a, b, out=None):
    """(exact_matmul(a, b) where `_narrow_product` does not answer, its NaN as they come; whether it holds no NaN):
    into `out` where the bound by the norms answers (else fresh). That bound answers only where a and b are finite
    (`rounded_by_norms`), whose sums are finite or past float32's range (inf), never NaN: no pass to look for one
    (`_exact_alone`; ~1 ms of a 919k MLP's fp32 step on 8 ranks)."""
    tried = narrow_host(a) and narrow_host(b)  # `_narrow_product` ran the bound by rows, or found NaN or inf
    if not tried:
        if a.dtype == np.float64 or b.dtype == np.float64:
            return a @ b, False
        if not (has_values(a) and has_values(b)):
            return a.astype(np.float32) @ b.astype(np.float32), False
    ns = namespace_of(a)
    a64, b64 = _widen_both(a, b, ns)
    k = a64.shape[-1]
    precision_a, precision_b = ns.format_of(a).precision, ns.format_of(b).precision
    # fp32 operands on the host: one GEMM, its error bounded by the norms (_norm_bound.py); a bound by rows and
    # columns (below) cannot pass for them
    if ns.is_numpy and not tried and precision_a + precision_b + k.bit_length() + _SPAN_FOR_REAL_DATA >= 53:
        found = _norms().rounded_by_norms(a64, b64, out)
        if found is not None:
            out, suspects = found
            return (out if suspects is None else _settle_by_magnitudes(out, suspects, a64, b64, ns)), True
    c = a64 @ b64  # (..., M, N) float64, summed in the machine's order
    # -0 becomes +0 (a BLAS that starts a sum from its first product may give -0 for products of -0 only; OpenBLAS
    # gives +0): where Σ|products| is 0 every product is 0, an exact zero; a zero c anywhere else is a suspect
    c += 0.0
    if k == 0:  # no products: every element's exact sum is +0 (the facts below reduce over K, which has no identity)
        return narrow32(c, ns), True
    # on the host (a device's arrays go the long way), where a bound by rows and columns can pass, and not tried
    # already (`_narrow_product` ran the same bound from the same facts, read off the bits, or found NaN or inf)
    if ns.is_numpy and not tried and precision_a + precision_b + k.bit_length() + _SPAN_FOR_REAL_DATA < 53:
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # NaN, inf, float32's overflow: as below
            facts_a = (None, _quantum(np.abs(a64), precision_a, axis=-1))
            out = _shortcut(c, a64, facts_a, b64, _float_extents(b64, precision_b, axis=-2), ns)
        if out is not None:
            return out, False
    with np.errstate(invalid="ignore", over="ignore"):  # NaN or inf came in: certain_f32 leaves those alone
        size = np.abs(a64) @ np.abs(b64)  # (..., M, N) Σ_k |a_ik·b_kj|, to within γ(K)
        # a narrow product whose whole bound failed (K·max|a|·max|b| is loose) is mostly exact all the same: where
        # the largest Σ|a·b| stays below 2**53 whole quanta, c = s everywhere and rounding it once is the answer
        if tried and _exact_by_whole_quanta(a, b, size.max(initial=0.0) * (1 + (k + 2) * _ERROR_PER_TERM)):
            return narrow32(c, ns), False
        err = size * ((k + 2) * _ERROR_PER_TERM)  # (..., M, N) >= |c - s|
    out, suspects = certain_f32(c, err, ns)
    if not bool(suspects.any()):
        return out, False
    return _settle_suspects(out, suspects, c.shape[:-2], size, a, b, a64, b64, tried, ns), False


def _norms():
    """_norm_bound.py, imported by the first product that needs a bound by the norms (an fp32 product on the host, a
    narrow one whose bound by rows and columns fails): not a cost of importing the engine. The pool's workers
    (`Cluster(N, workers=k)`) make their first fp32 products at once: the face hands each the whole module, the
    others waiting while one imports it (zerosim/_lazy.py `_whole`), and each keeps the same module here."""
    if not _NORM_BOUND:
        from zerosim.precision.arithmetic import _norm_bound

        _NORM_BOUND.append(_norm_bound)
    return _NORM_BOUND[0]


_NORM_BOUND = []  # the module, once imported (`_norms`: a look-up here costs a tenth of an import statement's)


def _widen_both(a, b, ns) -> tuple:
    """a and b in float64: on the host into reused buffers (a Gram matrix's b a view of a's copy), else `widen64`."""
    if ns.is_numpy:  # exact, and so is every product of them; into reused buffers (_scratch.py)
        # b's columns contiguous where it is a transposed matrix already (the forward's W.T) or short (dW's x)
        b_columns = b.ndim >= 2 and (np.swapaxes(b, -1, -2).flags.c_contiguous or b.shape[-2] <= _norms().SHORT_K)
        a64 = _widened(a, 6, True)
        # a @ a.T (a Gram matrix: Newton-Schulz's) from one widened copy: a BLAS multiplies a matrix by its own
        # transpose in half the FLOPs (NumPy calls syrk), and each element is the same exact sum either way
        b64 = a64.T if _transpose_of(b, a) else _widened(b, 7, not b_columns)
    else:
        a64, b64 = widen64(a, ns), widen64(b, ns)
    return a64, b64


def _settle_suspects(out, suspects, batch: tuple, size, a, b, a64, b64, tried: bool, ns):
    """`out` with its suspects settled: those whose every partial sum is a whole number of quanta are exact (c = s);
    the rest repaired the long way (`_repair`)."""
    k = a64.shape[-1]
    precision_a, precision_b = ns.format_of(a).precision, ns.format_of(b).precision
    # Exact in any order where every product is a whole multiple of q = q_i·q_j and every partial sum stays below
    # 2**53·q: then c = s, and a suspect that is an exact float32 midpoint is a true tie, settled by ties-to-even
    # (16-bit inputs are mostly exact, and their sums often land on float32 midpoints)
    where = ns.to_host(suspects).nonzero()  # (..., i, j) index arrays of the suspects
    *lead, i, j = where
    with np.errstate(invalid="ignore", over="ignore"):
        bound = ns.to_host(size)[where] * (1 + (k + 2) * _ERROR_PER_TERM)  # (suspects,) >= every partial sum
        if tried and _exact_by_whole_quanta(a, b, bound):  # most 16-bit products: no pass over a or b
            return out
        q_a = np.broadcast_to(ns.to_host(_quantum(np.abs(a64), precision_a, axis=-1)), batch + a64.shape[-2:-1])
        q_b = np.broadcast_to(ns.to_host(_quantum(np.abs(b64), precision_b, axis=-2)), batch + b64.shape[-1:])
        exact = bound < q_a[(*lead, i)] * q_b[(*lead, j)] * 2.0**53  # (suspects,)
    if exact.all():
        return out
    return _repair(out, tuple(x[~exact] for x in where), a64, b64, ns)


def _transpose_of(b, a) -> bool:
    """True where 2-D b is a's transpose, a view of the same memory."""
    return (a.ndim == 2 and b.ndim == 2 and b.shape == a.shape[::-1] and b.strides == a.strides[::-1]
            and b.dtype == a.dtype and b.ctypes.data == a.ctypes.data)


def _widened(x, slot: int, lines_last: bool):
    """Host array x as float64 (exact), in this thread's buffer `slot` (_scratch.py). `lines_last`: x's lines along
    its last axis contiguous (a's rows), else along its second-to-last (b's columns): the few elements summed on
    their own later gather their row of a and column of b (`_magnitudes`, `_repair`), and a strided line costs a
    cache miss per product (ZeRO's dW = dy.T @ x: 11,000 of a product's elements on a ReLU's sparse lines)."""
    if lines_last or x.ndim < 2:
        x64 = scratch(x.shape, slot)
    else:
        x64 = np.swapaxes(scratch(x.shape[:-2] + x.shape[:-3:-1], slot), -1, -2)
    np.copyto(x64, x)
    return x64


def _exact_by_whole_quanta(a, b, bound) -> bool:
    """True if every suspect's partial sums (each at most `bound`) are whole multiples of the whole operands'
    quanta q_a·q_b (<= each row's q_i times each column's q_j) below 2**53·q_a·q_b: float64s, so c = s there.
    Narrow host a and b: the quanta are the whole bound's, remembered (`kept_extent`), so this costs no pass."""
    ea = kept_extent(a)
    eb = None if ea is None else kept_extent(b)
    return eb is not None and bool(np.all(bound < ea[1] * eb[1] * 2.0**53))


def _narrow_product(a, b, once: bool = False):
    """exact_matmul of two host arrays of 16- or 8-bit formats, proved from their bits (_extents.py), a large
    operand's float64 copy and facts kept across products (_operand_cache.py), but not a large a's where it is made
    for this product alone (`once`); None where NaN or inf came in or more than one element in 16 is unsure (the
    long way then)."""
    if a.size + b.size < _WHOLE_FIRST:  # small: one bound over each whole operand, else the long way
        if not whole_bound_holds(a, b, kept_extent):  # a small stack's extent kept too: the long way reads it again
            return None  # its second GEMM costs less than facts by rows and columns (notebook 11: 100 µs vs 150)
        c = a.astype(np.float64) @ b.astype(np.float64)
        c += 0.0  # -0 becomes +0, as below
        return c.astype(np.float32)
    left, right = operand_once(a) if once else operand(a), operand(b)
    facts_a, facts_b = left.facts(-1), right.facts(-2)
    if facts_a is None or facts_b is None:
        return None
    a64, b64 = left.wide_in(_A_SLOT), right.wide_in(_B_SLOT)  # float64 copies, in scratch where not kept
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # float32's overflow: inf, as the long way
        if a64.ndim == 3 and b64.ndim == 3 and a64.shape[0] == b64.shape[0]:  # n products, one each (ranks' dW)
            out = _shortcut_each(a64, facts_a, b64, facts_b)
        else:  # c (a64 @ b64, its -0s made +0 as it is rounded) made once the bound is known to pass
            out = _shortcut(None, a64, facts_a, b64, facts_b, NUMPY)
    return _narrow_by_norms(a64, facts_a, b64, facts_b) if out is None else out


def _narrow_by_norms(a64, facts_a, b64, facts_b):
    """exact_matmul of narrow a64 @ b64 where the bound by rows and columns leaves more than one element in 16 unsure
    (magnitudes spread wide within a line: a 10M MLP's larger products): one GEMM, its error bounded by the norms
    (_norm_bound.py), and its few suspects settled as `_settle` settles them: exact by their quanta (c = s; an exact
    float32 midpoint is a true tie, which narrow sums often are), else rounded where their own Σ_k |a_ik·b_kj| allows,
    else summed exactly (`_repair`). The long way took three GEMMs (this product's, again, and |a| @ |b|). None where
    the suspects are many too (the long way then)."""
    bound = _norms()
    found = bound.rounded_by_norms(a64, b64, in_pieces=False)  # its suspects lie on midpoints: no pieces
    if found is None:
        return None
    out, suspects = found
    if suspects is None:
        return out
    where, y = suspects
    if len(y) > out.size // 16:
        return None
    batch = out.shape[:-2]
    *lead, i, j = where
    q = (np.broadcast_to(facts_a[1], batch + facts_a[1].shape[-1:])[(*lead, i)]
         * np.broadcast_to(facts_b[1], batch + facts_b[1].shape[-1:])[(*lead, j)])  # (count,) q_i·q_j
    k = a64.shape[-1]
    # first by Cauchy-Schwarz, ||a_i||·||b_j|| >= Σ_k |a_ik·b_kj| (two passes over the operands, not K products each);
    # the norms' own rounding (<= (2K + 16)·2**-53 relative, _norm_bound.py) covered by the same slack
    rows, columns = bound.line_norms(a64, b64)  # (..., M), (..., N)
    norms = (np.broadcast_to(rows, batch + rows.shape[-1:])[(*lead, i)]
             * np.broadcast_to(columns, batch + columns.shape[-1:])[(*lead, j)] * bound.SLACK)  # (count,)
    where, q, y = _unsettled_at(y, where, norms, q, k, NUMPY)
    if len(where[-1]):
        where, _, _ = _unsettled_at(y, where, _magnitudes(where, a64, b64), q, k, NUMPY)
    return _repair(out, where, a64, b64, NUMPY) if len(where[-1]) else out


def _shortcut(c, a64, facts_a, b64, facts_b, ns):
    """c rounded to float32, with the few elements `_unsure` leaves settled one by one; None where more than one in
    16 are unsure (the long way is cheaper then). facts: (max|x| or None, q) by rows of a and by columns of b. c None:
    a64 @ b64, made here once the bound passes (a product it fails for is made another way)."""
    shape = np.broadcast_shapes(a64.shape[:-2], b64.shape[:-2]) + (a64.shape[-2], b64.shape[-1])
    columns = facts_b[0] / facts_b[1]  # (..., N) max_k |b_kj| / q_j
    if _rows_hold(a64.shape[-1], facts_a, columns):  # every element sure from the facts alone: no pass over a64
        sums, where = None, None
    else:
        sums = np.abs(a64).sum(axis=-1)  # (..., M) Σ_k |a_ik| (NaN, inf: unsure below)
        rows = sums / facts_a[1]  # (..., M)
        where = _unsure_by_batch(rows, columns, math.prod(shape) // 16)  # as `_unsure` finds them (a test says so)
    if where is MANY:
        return None
    if c is None:  # (..., M, N) float64, summed in the machine's order; in scratch: it never leaves this call
        c = np.matmul(a64, b64, out=scratch(shape, _C_SLOT))
    count = 0 if where is None else len(where[0])
    # c = s wherever the bound holds: rounding it once is the answer (inf beyond float32's range)
    out = _rounded_plus_zero(c, facts_a[1], facts_b[1])  # (..., M, N) float32
    if count:
        batch, m, n = c.shape[:-2], c.shape[-2], c.shape[-1]
        *lead, i, j = where
        if batch:  # leading dims broadcast: each element's row and column facts found through them
            sums, q_rows = (np.broadcast_to(x, batch + (m,))[(*lead, i)] for x in (sums, facts_a[1]))  # (count,)
            largest, q_columns = (np.broadcast_to(x, batch + (n,))[(*lead, j)] for x in facts_b)
        else:
            sums, q_rows, largest, q_columns = sums[i], facts_a[1][i], facts_b[0][j], facts_b[1][j]  # (count,)
        size, q = sums * largest, q_rows * q_columns  # Σ_k|a_ik|·max_k|b_kj| >= Σ_k|a_ik·b_kj|
        out = _settle(out, c, where, size, q, a64, b64, ns)
    return out


def _shortcut_each(a64, facts_a, b64, facts_b):
    """`_shortcut` of n products a64 (n, M, K) @ b64 (n, K, N), one by one (a ZeRO step's dW: each rank's own, the
    ranks' micro-batches stacked, models/_stacked.py), their unsure elements found for all n at once from facts read
    for all n at once: each product's float64 GEMM is rounded into its block of the answer and its unsure elements
    settled while its c is at hand: `_ROUNDED_AT_ONCE` elements of c at a time, in one buffer, rounded while still in
    cache (the n products' c whole, 32 MB at 919k parameters on 8 ranks, would be rounded from
    memory); small products several whole ones at a time (`_shortcut_stacked`). Each element settled as `_shortcut`
    settles it for product p alone: the same bits (which way rounds an exact zero to +0 is decided per block: both
    give an exact sum's rounding). None past one in 16 unsure."""
    n, m, k = a64.shape
    columns = facts_b[0] / facts_b[1]  # (n, N) max_k |b_kj| / q_j
    if _rows_hold(k, facts_a, columns):  # every product's every element sure from the facts alone
        sums, where = None, None
    else:
        sums = np.abs(a64).sum(axis=-1)  # (n, M) Σ_k |a_ik|
        where = _unsure_by_batch(sums / facts_a[1], columns, n * m * b64.shape[-1] // 16)  # (p, i, j) or None
    if where is MANY:
        return None
    width = b64.shape[-1]
    out = np.empty((n, m, width), np.float32)
    step = max(1, min(m, _ROUNDED_AT_ONCE // max(1, width)))  # rows of c made and rounded at a time
    per = _PRODUCTS_AT_ONCE // max(1, m * width) if step == m else 1
    if per > 1:  # small products, several whole ones at a time (`_PRODUCTS_AT_ONCE`)
        return _shortcut_stacked(out, a64, facts_a, b64, facts_b, where, sums, per)
    block = np.empty((step, width))  # c's rows, reused block by block (the allocator's own memory from call to call)
    for p in range(n):
        mine = None if where is None else np.flatnonzero(where[0] == p)
        for start in range(0, m, step):
            stop = min(m, start + step)
            c = np.matmul(a64[p, start:stop], b64[p], out=block[:stop - start])  # (rows, N) float64
            _rounded_plus_zero(c, facts_a[1][p, start:stop], facts_b[1][p], out=out[p, start:stop])
            if mine is not None and len(mine):
                here = mine[(where[1][mine] >= start) & (where[1][mine] < stop)]
                _settle_product(out[p, start:stop], c, p, start, here, where, sums, facts_a, facts_b, a64, b64)
    return out


def _shortcut_stacked(out, a64, facts_a, b64, facts_b, where, sums, per: int):
    """`_shortcut_each`'s products `per` whole ones at a time, each group one batched GEMM and one rounding into out
    (n, M, N) (10k parameters on 64 ranks: 192 products a step, each its own GEMM and rounding before). Each
    element's bits are its own, however many products it is made beside (`_shortcut` makes them all as one), and
    the +0 rule chosen per group holds for each of its products (their smallest quanta are no smaller)."""
    n = len(out)
    block = scratch((min(per, n),) + out.shape[1:], 8)  # c of a group, reused group by group and call by call
    # `_rounded_plus_zero`'s way, chosen once for every group by the whole stack's smallest quanta: each group's are
    # no smaller, and either way gives an exact sum's rounding where it is taken (a tenth of a small stack's time)
    after = _zero_after(facts_a[1], facts_b[1])
    for first in range(0, n, per):
        last = min(n, first + per)
        c = np.matmul(a64[first:last], b64[first:last], out=block[:last - first])  # (products, M, N) float64
        _rounded_with_zero(c, after, out[first:last])
        for p in () if where is None else range(first, last):
            here = np.flatnonzero(where[0] == p)
            _settle_product(out[p], c[p - first], p, 0, here, where, sums, facts_a, facts_b, a64, b64)
    return out


def _settle_product(out, c, p: int, start: int, here, where, sums, facts_a, facts_b, a64, b64) -> None:
    """Product p's unsure elements `here` (positions in `where`) among c's rows from `start` on, settled in `out`,
    its rounded rows, in place, as `_shortcut` settles them."""
    if not len(here):
        return
    i, j = where[1][here], where[2][here]  # (count,) product p's unsure elements in these rows
    size, q = sums[p][i] * facts_b[0][p][j], facts_a[1][p][i] * facts_b[1][p][j]  # as `_shortcut` has them
    rows = slice(start, start + len(c))
    _settle(out, c, (i - start, j), size, q, a64[p, rows], b64[p], NUMPY)


def _rows_hold(k: int, facts_a, columns) -> bool:
    """True where `_unsure` would find no unsure element, shown without Σ_k |a_ik|: K·max_k |a_ik| bounds it (each
    partial float64 sum of K terms at most max_k |a_ik| is at most K times it, K·max exact), so the largest row's
    K·max|a_i| / q_i times the largest of `columns` below 2**52 is `_unsure`'s first test passed with room to spare.
    A ZeRO step's dW products (K: the rows of one micro-batch) mostly pass it (benchmarks/products.py). False where
    a's largest magnitudes are not known (fp32 operands: `_float_extents` of b only) or the test fails: nothing
    follows, the sums decide."""
    if facts_a[0] is None or not columns.size or not facts_a[1].size:
        return False
    return float((facts_a[0] / facts_a[1]).max()) * k * float(columns.max()) < 2.0**52


def _rounded_plus_zero(c, q_rows, q_columns, out=None):
    """c (..., M, N) float64, each element an exact sum, rounded to float32 with an exact zero as +0 (a BLAS that
    starts a sum from its first product may give -0 for products of -0 only) and a tiny negative sum's -0 kept.
    q_rows (..., M), q_columns (..., N): every product of element (i, j), so its sum, is a whole multiple of
    q_i·q_j. Where every q_i·q_j reaches float32's smallest subnormal, no nonzero sum rounds to zero: the float32
    zeros are the exact zeros, and +0 is added after rounding, over half the bytes; else before, in float64. A plain
    cast either way: `np.add(c, 0.0, out=float32)` does both in one pass, but through NumPy's buffered casting loop,
    slower than the two (72 products of benchmarks/yardstick.py's 919k step: 1-2 ms; speed.md section 1, item 9)."""
    return _rounded_with_zero(c, _zero_after(q_rows, q_columns), out)


def _zero_after(q_rows, q_columns) -> bool:
    """Whether `_rounded_plus_zero` may make exact zeros +0 after rounding: every q_i·q_j reaches float32's smallest
    subnormal."""
    return q_rows.min(initial=np.inf) * q_columns.min(initial=np.inf) >= _F32_TINIEST


def _rounded_with_zero(c, after: bool, out=None):
    """`_rounded_plus_zero` of c, its +0 made `after` rounding (`_zero_after` said so) or before."""
    if after:
        out = _narrowed(c, out)
        out += np.float32(0.0)
        return out
    c += 0.0
    return _narrowed(c, out)


def _narrowed(c, out=None):
    """float64 c rounded to float32 (NumPy's cast: to nearest even, inf past float32's range), into `out` if given
    (the same cast loop, no new array)."""
    if out is None:
        return c.astype(np.float32)
    np.copyto(out, c, casting="same_kind")
    return out


def _float_extents(x64, precision: int, axis: int) -> tuple:
    """(max|x|, q) along `axis` of the float64 copy of an operand whose bits `extents` cannot read (fp32 values)."""
    magnitude = np.abs(x64)
    return magnitude.max(axis=axis), _quantum(magnitude, precision, axis=axis)


MANY = "more unsure elements than the limit"  # what `_unsure` and `_unsure_sorted` say instead of listing them


def _unsure(rows, columns, limit=None):
    """Index arrays (..., i, j) of the elements, or None where there are none, where a bound by rows and columns
    cannot show that every partial sum of the element's K products is a float64. Every a_ik of row i is a whole
    multiple of q_i (`_quantum`), every b_kj of column j of q_j, so every product and partial sum of element (i, j)
    is a whole multiple of q_i·q_j, of magnitude at most Σ_k |a_ik|·max_k |b_kj|; below 2**53·q_i·q_j each is a
    float64, in any order, and c = s there. `rows` holds Σ_k |a_ik| / q_i, `columns` max_k |b_kj| / q_j; compared
    with 2**52: a factor of two to spare covers the rounding of the sum and of the products below. A few passes over
    a and b, where step 1's bound costs a second GEMM and a dozen passes over c. NaN or inf: unsure. The naive twin
    of `_unsure_sorted`, and the way for batched products. `MANY` where there are more than `limit` (if given)."""
    if rows.size and columns.size and rows.max() * columns.max() < 2.0**52:  # the largest pair holds: every pair
        return None
    unsure = ~(rows[..., :, None] * columns[..., None, :] < 2.0**52)
    if limit is not None and np.count_nonzero(unsure) > limit:
        return MANY
    return unsure.nonzero()


def _unsure_sorted(rows, columns, limit=None):
    """`_unsure` for one product (rows (M,), columns (N,)) without its (M, N) mask. Only candidates are looked at: a
    row pairs unsure with some column only if it does with the largest (rounding is monotone), and a column only
    with the largest row. A block of at most `_BLOCK` candidates (a ZeRO step's forward and dx products: ~30 rows of
    activations against a few hundred columns) is masked whole, in fewer NumPy calls than a sort and a search; a
    larger one has its shorter side sorted and each line of the longer side is unsure against a tail of it
    (rows_i·columns_j >= 2**52 where columns_j >= 2**52 / rows_i, and the same with the roles swapped), found by a
    binary search: O((M + N) log min(M, N) + unsure) where the whole mask costs three passes over M·N. Which
    elements, not their order, is what matters: the caller settles each on its own. NaN (only from NaN or inf
    inputs): the whole mask. `MANY` past `limit` (the search counts before it makes a single index)."""
    if not (rows.size and columns.size):
        return None
    top_row, top_column = rows.max(), columns.max()
    if top_row * top_column < 2.0**52:
        return None
    if not (top_row < np.inf and top_column < np.inf):  # NaN or inf (from NaN or inf inputs): the whole mask
        return _unsure(rows, columns, limit)
    r = np.flatnonzero(rows * top_column >= 2.0**52)  # (R,) candidate rows
    c = np.flatnonzero(columns * top_row >= 2.0**52)  # (C,) candidate columns
    if len(r) * len(c) <= _BLOCK:
        found = (rows[r, None] * columns[None, c] >= 2.0**52).nonzero()  # the (R, C) mask's unsure pairs
        found = MANY if limit is not None and len(found[0]) > limit else found if len(found[0]) else None
    elif len(r) >= len(c):
        found = _tails(rows[r], columns[c], limit)
    else:
        found = _tails(columns[c], rows[r], limit)  # sort the rows, search for each column
        found = found if found is None or found is MANY else (found[1], found[0])
    return found if found is None or found is MANY else (r[found[0]], c[found[1]])


def _unsure_by_batch(rows, columns, limit=None):
    """`_unsure` for any product, batched or not, by `_unsure_sorted`: one product's rows (M,) and columns (N,) as
    they are; a batched product's (..., M) and (..., N) product by product, only those whose largest row and column
    fail the bound searched (a ZeRO step's dW: each rank's own product, the ranks' batch; the mask would cost three
    passes over n·M·N where a rank or two hold a few unsure elements). The same elements, in another order; `MANY`
    past `limit` over the whole batch."""
    if rows.ndim == 1 and columns.ndim == 1:
        return _unsure_sorted(rows, columns, limit)
    batch = np.broadcast_shapes(rows.shape[:-1], columns.shape[:-1])
    rows = np.broadcast_to(rows, batch + rows.shape[-1:]).reshape(-1, rows.shape[-1])  # (products, M)
    columns = np.broadcast_to(columns, batch + columns.shape[-1:]).reshape(-1, columns.shape[-1])  # (products, N)
    if not (rows.size and columns.size):
        return None
    doubt = np.flatnonzero(~(rows.max(axis=-1) * columns.max(axis=-1) < 2.0**52))  # products to search (NaN: too)
    found, total = [], 0
    for p in doubt.tolist():
        where = _unsure_sorted(rows[p], columns[p], None if limit is None else limit - total)
        if where is MANY:
            return MANY
        if where is not None:
            total += len(where[0])
            found.append((np.full(len(where[0]), p), *where))
    if not found:
        return None
    p, i, j = (np.concatenate(x) for x in zip(*found))
    return (*np.unravel_index(p, batch), i, j)


def _tails(long, short, limit=None):
    """Index arrays (l, s) of the pairs with long_l·short_s >= 2**52 (but for rounding, which the factor of two
    to spare covers), `short` sorted once and each of `long`'s lines searched in it; None if none, `MANY` if more
    than `limit`."""
    order = np.argsort(short, kind="stable")  # (S,)
    with np.errstate(divide="ignore", over="ignore"):
        limits = 2.0**52 / long  # (L,) a `short` value at or above it pairs unsure
    starts = np.searchsorted(short[order], limits, side="left")  # (L,) line l's tail begins here
    counts = len(short) - starts  # (L,)
    total = int(counts.sum())
    if total == 0:
        return None
    if limit is not None and total > limit:
        return MANY
    l_index = np.repeat(np.arange(len(long)), counts)  # (total,)
    first = np.repeat(starts - (np.cumsum(counts) - counts), counts)  # each pair's offset into its line's tail
    return l_index, order[first + np.arange(total)]


def _settle(out, c, where, size, q, a64, b64, ns):
    """`out` (c rounded) with the elements at index arrays `where` settled as the long way settles them, from `size`
    (count,) >= Σ_k |a_ik·b_kj| and `q` (count,) = q_i·q_j: exact by their quanta, or rounded where the error bound
    allows, or summed exactly (`_repair`). `size` is the bound by rows and columns, not the sum of magnitudes: a
    looser error bound leaves more elements unsure, and costs no GEMM of the rows they lie in. The few it leaves
    (about one in a hundred) get their own Σ_k |a_ik·b_kj| from their K products and are tried again: most pass
    (58 of 67 in a step of benchmarks/yardstick.py's 919k MLP), and only the rest are summed exactly, at ~50 µs
    each for K = 1024 where the K products of all of them cost about as much as one."""
    where, q = _unsettled(c, where, size, q, a64.shape[-1], ns)
    if len(where[-1]) == 0:
        return out
    where, _ = _unsettled(c, where, _magnitudes(where, a64, b64), q, a64.shape[-1], ns)
    if len(where[-1]) == 0:
        return out
    return _repair(out, where, a64, b64, ns)


def _settle_by_magnitudes(out, suspects, a64, b64, ns):
    """`out` (a host array) with the suspects (index arrays `where`, their float64 sums `y`) settled from their K
    products, gathered once (`_lines`): rounded where their own Σ_k |a_ik·b_kj| bounds the GEMM's error enough, else
    where their sums twice as precise do (`_twice_settled`), else summed exactly one by one (`_one_by_one`), as
    `_repair` settles them; but each suspect's row of a and column of b are gathered once for the first two, not
    once for its sum of magnitudes and again for `_repair` (a 10M MLP's fp32 step leaves ~2,300 suspects at K =
    1,024-2,560, and ~1,200 of them to `_repair`: 40 -> 34 ms a step). So few that `_repair` would sum them one by
    one (`_ONE_BY_ONE`), they are summed so at once: the sums of magnitudes' ~15 NumPy calls cost more than the
    exact sums they spare (a rank's dW of a 919k MLP leaves one or two at K = 32: ~100 µs a product against ~25).
    The suspects are those of `rounded_by_norms` with its pieces (its default, as fp32 operands and Gram matrices
    call it), whose c errs as one GEMM over K' terms (_norm_bound.py `summed_terms`): their sums of magnitudes bound
    that error (the sums themselves formed over all K, within γ(K-1): the margin in `_SUMMED_PER_TERM` covers that
    for any K under 2**31, as it does for K' = K)."""
    where, y = suspects
    k = a64.shape[-1]
    error_per_size = (_norms().summed_terms(a64, b64) + 2) * _SUMMED_PER_TERM  # c's error <= this·Σ|a·b| computed
    if len(y) * (k + 100) < _ONE_BY_ONE:
        _one_by_one(out, where, a64, b64)
        return out
    left = []  # (index arrays, their K products) of those their sums of magnitudes leave in doubt
    for lines, rows, columns in _lines(where, a64, b64):
        products = np.multiply(rows, columns, out=rows)  # (count, K) exact products (finite: so were the norms)
        size = np.abs(products, out=scratch(products.shape, 22)).sum(axis=1)  # Σ_k |a_ik·b_kj|, within γ(K-1)
        _, doubt = certain_f32(y[lines], size * error_per_size, ns)
        if doubt.any():
            left.append((tuple(x[lines][doubt] for x in where), products[doubt]))
    if not left:
        return out
    few = sum(len(part[-1]) for part, _ in left) * (k + 100) < _ONE_BY_ONE  # as `_repair` judges it
    rest = [part if few else _twice_settled(out, part, products) for part, products in left]
    _one_by_one(out, tuple(np.concatenate(x) for x in zip(*rest)), a64, b64)
    return out


def _unsettled(c, where, size, q, k: int, ns) -> tuple:
    """(index arrays, q) of the elements at `where` whose c rounded once may not be s rounded once, judged from
    `size` (count,) >= Σ_k |a_ik·b_kj| and q (count,): not shown exact by their quanta (every partial sum below
    2**53·q_i·q_j) and not certain to round alike anywhere within the error bound. Where the one holds c = s; where
    the other does, s rounds as c does: either way the float32 already in `out` is the answer."""
    return _unsettled_at(c[where], where, size, q, k, ns)[:2]


def _unsettled_at(y, where, size, q, k: int, ns) -> tuple:
    """`_unsettled` from y (count,), the float64 sums c at `where`; and the y of those it leaves."""
    exact = size * (1 + (k + 2) * _ERROR_PER_TERM) < q * 2.0**53
    rest = tuple(x[~exact] for x in where)
    _, suspects = certain_f32(y[~exact], size[~exact] * ((k + 2) * _ERROR_PER_TERM), ns)
    return tuple(x[suspects] for x in rest), q[~exact][suspects], y[~exact][suspects]


def _magnitudes(where, a64, b64) -> np.ndarray:
    """(count,) Σ_k |a_ik·b_kj| of the elements at index arrays `where` (host float64 a and b, leading dims
    broadcast): each product exact, their sum within γ(K) of the true one, which `_ERROR_PER_TERM` covers. Gathered
    a few thousand elements at a time (`_lines`)."""
    size = np.empty(len(where[-1]))
    for part, rows, columns in _lines(where, a64, b64):  # (count, K) each
        size[part] = np.einsum("ck,ck->c", np.abs(rows, out=rows), np.abs(columns, out=columns))
    return size


def _lines(where, a64, b64):
    """(part, rows of a, columns of b) for parts `part` (slices or index arrays) of the elements at index arrays
    `where`, a few thousand products at a time (host a and b, leading dims broadcast), (count, K) each, the caller's
    to overwrite. A 2-D product's lines go to this thread's buffers (_scratch.py): a gather into memory fresh from the
    system costs a page fault per 4 kB (the few hundred elements a 919k MLP's products leave to sum at K = 1024: 1.4
    ms of a 7.7 ms product). Strided columns of b (dx = dy @ W) are gathered along b's rows (np.take of strided
    lines is ten times slower), the elements in the order of their columns: a part's columns then share b's cache
    lines, where in the suspects' own order each column costs a line of each of b's K rows (a 10M MLP's dx, 1,177
    suspects at K = 2560: 49-55 ms to settle in their own order, 29-34 ms sorted)."""
    *lead, i, j = where
    step = gathered_rows(a64.shape[-1])
    columns = np.swapaxes(b64, -1, -2)  # (..., N, K)
    batched = lead or a64.ndim != 2 or b64.ndim != 2
    if batched:
        batch = np.broadcast_shapes(a64.shape[:-2], b64.shape[:-2])
        a64, columns = (np.broadcast_to(x, batch + x.shape[-2:]) for x in (a64, columns))
    k = a64.shape[-1]
    strided = not batched and columns.strides[-1] != columns.itemsize
    order = np.argsort(j, kind="stable") if strided and len(j) > step else None
    for start in range(0, len(i), step):
        part = slice(start, start + step) if order is None else order[start:start + step]
        *lead_part, i_part, j_part = (x[part] for x in where)
        if batched:
            yield part, a64[(*lead_part, i_part)], columns[(*lead_part, j_part)]
            continue
        count = len(i_part)
        rows = np.take(a64, i_part, axis=0, out=scratch((count, k), 20), mode="clip")  # "clip": no buffered copy
        if not strided:  # (every index is in range)
            yield part, rows, np.take(columns, j_part, axis=0, out=scratch((count, k), 21), mode="clip")
        else:
            yield part, rows, np.take(b64, j_part, axis=1, out=scratch((k, count), 21), mode="clip").T


def _quantum(magnitude, precision: int, axis: int):
    """(...,) float64 along `axis` of magnitude = |x| (x: values of a format with `precision` significant bits): a
    power of two every element is a whole multiple of, 2**(e - precision) for the smallest nonzero |x| = m·2**e, m
    in [0.5, 1) (+inf where all are 0, or where one is NaN). Below the format's normal range the true quantum is
    larger: this stays a divisor."""
    # the zeros lifted above every value (|x| < 2**129 for formats of 32 bits or fewer) rather than masked: a masked
    # copy or a masked minimum costs four to eight times as much on a large matrix
    smallest = (magnitude + (magnitude == 0) * _ABOVE_ALL).min(axis=axis)
    _, e = np.frexp(smallest)
    return np.where(smallest < _ABOVE_ALL, np.ldexp(1.0, e - precision), np.inf)  # NaN compares False: inf


def _repair(out, where, a64, b64, ns):
    """`out` with the elements at index arrays `where` replaced by their exact sums rounded once (on the host: they
    are few). Their sums to twice float64's precision first, all at once (`_twice_settled`): they round to float32
    alone but for near-ties, which `exact_sum_f32` sums exactly, one by one; so are all of them where they are few
    enough (`_ONE_BY_ONE`)."""
    a_h, b_h = ns.to_host(a64), ns.to_host(b64)
    host = out if ns.is_numpy else ns.to_host(out)
    few = len(where[-1]) * (a64.shape[-1] + 100) < _ONE_BY_ONE
    rest = [_twice_settled(host, tuple(x[lines] for x in where), np.multiply(rows, columns, out=rows))
            for lines, rows, columns in (() if few else _lines(where, a_h, b_h))]  # (step, K) exact products
    _one_by_one(host, tuple(np.concatenate(x) for x in zip(*rest)) if rest else where, a_h, b_h)
    return host if ns.is_numpy else ns.from_host(host)


def _twice_settled(host, part, products) -> tuple:
    """Index arrays of the elements at `part` left in doubt by their sums to twice float64's precision
    (_twice_precise.py) from their K products (count, K), the others' rounded sums put in `host`. A NaN or inf
    product leaves its element in doubt: the one-by-one sum gives the canonical NaN."""
    finite = np.isfinite(products).all(axis=1)
    if not finite.all():
        products[~finite] = 0.0
    sums, errors = twice_precise_sums(products)
    rounded, doubt = certain_f32(sums, errors, NUMPY)
    doubt |= ~finite
    host[tuple(x[~doubt] for x in part)] = rounded[~doubt]
    return tuple(x[doubt] for x in part)


def _one_by_one(host, where, a_h, b_h) -> None:
    """The elements at index arrays `where` of `host` set to their exact sums rounded once (`exact_sum_f32` of their
    K exact products each), from host a and b (leading dims broadcast)."""
    batch = host.shape[:-2]
    a_h = np.broadcast_to(a_h, batch + a_h.shape[-2:])  # views: batch dims broadcast, nothing copied
    b_h = np.broadcast_to(b_h, batch + b_h.shape[-2:])
    host[where] = [exact_sum_f32((a_h[(*lead, i)] * b_h[(*lead, slice(None), j)]).tolist())
                   for *lead, i, j in zip(*where)]


def exact_sum_f32(terms: list) -> np.float32:
    """The exact sum of float `terms` rounded once to nearest-even float32 (+0 for an exact zero)."""
    s = math.fsum(terms)  # the exact sum rounded once to float64 (0 only for an exact zero)
    if s != s:  # a NaN term: the canonical NaN (_nan.py)
        return CANONICAL_NAN[np.dtype(np.float32)]
    if s == 0.0:
        return np.float32(0.0)
    with np.errstate(over="ignore"):
        nearest = np.float32(s)  # right unless s is a float32 midpoint that the exact sum is not
    if not _is_f32_midpoint(s):
        return nearest
    rest = math.fsum(terms + [-s])  # exact sum - s, rounded: its sign says on which side of the midpoint it lies
    if rest == 0.0:
        return nearest  # a true tie: float32's ties-to-even settled it
    from fractions import Fraction  # a rare tie's: not a cost of importing the engine (tests/test_import_graph.py)

    return np.float32(f32_of_fraction(Fraction(s) + Fraction(rest)))  # s ± a little: rounds away from the tie


def _is_f32_midpoint(s: float) -> bool:
    """True where s lies halfway between two neighbouring float32 (or between the largest and the overflow)."""
    e = math.frexp(abs(s))[1] - 1  # 2**e <= |s| < 2**(e + 1)
    t = s / math.ldexp(1.0, max(e, -126) - 24)  # s in half-quanta of float32 at that binade: exact
    return t == math.floor(t) and int(t) % 2 == 1
