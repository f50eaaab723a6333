"""The exact values behind _correctly_rounded.py's functions, for the few arguments (suspects, about one in 2**19)
whose float64 evaluation cannot settle the float32 rounding: exp, log, tanh, sin and cos in Python's decimal module at
60 significant digits, and a power as an exact rational where it is one, else in decimal to ever more digits (Ziv's
strategy). _correctly_rounded.py says why and how; they live here so that importing the engine does not import
decimal and fractions, which only a suspect needs.
"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal
from fractions import Fraction

from zerosim.precision.arithmetic._round_once import f32_of_fraction

_DIGITS = 60  # significant decimal digits of the decimal evaluation of a suspect
# A rational power whose odd part or power of two needs more bits than this is computed no further as a rational: a
# float32 boundary has at most 25 significant bits and a binary exponent within ±300, so such a power is none
_EXACT_BITS = 4096
_MOST_DIGITS = 1 << 16  # Ziv's loop doubles the digits up to this; it ends far sooner for any value not a boundary


def _with_digits(extra: int = 0):
    """A decimal context of _DIGITS (+ extra) digits, exponent range wide enough for any float64."""
    return decimal.Context(prec=_DIGITS + extra, Emax=10**6, Emin=-(10**6))


def exp(x: Decimal) -> Decimal:
    with decimal.localcontext(_with_digits()):
        return x.exp()


def log(x: Decimal) -> Decimal:
    with decimal.localcontext(_with_digits()):
        return x.ln()


def tanh(x: Decimal) -> Decimal:
    # (e^2x - 1)/(e^2x + 1) cancels near 0: as many more digits as x has leading zeros
    with decimal.localcontext(_with_digits(max(0, -x.adjusted()) + 5)):
        t = (2 * x).exp()
        return (t - 1) / (t + 1)


def _pi(digits: int) -> Decimal:
    """π to `digits` digits (the decimal module documentation's recipe)."""
    with decimal.localcontext(_with_digits(digits - _DIGITS + 2)):
        lasts, t, s, n, na, d, da = 0, Decimal(3), 3, 1, 0, 0, 24
        while s != lasts:
            lasts = s
            n, na = n + na, na + 8
            d, da = d + da, da + 32
            t = (t * n) / d
            s += t
        return +s


def _taylor(x: Decimal, first: int) -> Decimal:
    """Σ (-1)^k x^(2k+first) / (2k+first)!: cos for first = 0, sin for first = 1 (small |x| after reduction)."""
    term = x if first else Decimal(1)
    total, k, last = term, first, None
    while total != last:
        last = total
        term = -term * x * x / ((k + 1) * (k + 2))
        total, k = total + term, k + 2
    return total


def _trig(x: Decimal, first: int) -> Decimal:
    extra = max(0, x.adjusted()) + 5  # digits lost reducing a large |x| by 2π
    with decimal.localcontext(_with_digits(extra)):
        two_pi = 2 * _pi(_DIGITS + extra + 5)
        r = x - two_pi * (x / two_pi).to_integral_value()  # |r| <= π
        return _taylor(r, first)


def sin(x: Decimal) -> Decimal:
    return _trig(x, 1)


def cos(x: Decimal) -> Decimal:
    return _trig(x, 0)


def power(base: float, e: Decimal):
    """base ** e (e a Decimal holding a float) as a number f32_of_fraction rounds correctly."""
    return power_exactly(base, Fraction(e))


def power_exactly(base: float, x: Fraction):
    """base ** x as a number f32_of_fraction rounds correctly: the exact rational where it is one (and small enough
    to be a float32 boundary), else a decimal value shown to round as the exact one does."""
    exact = _rational_power(Fraction(base), x)
    return exact if exact is not None else _power_settled(base, x)


def _rational_power(b: Fraction, x: Fraction) -> Fraction | None:
    """b ** x exactly for a binary float b > 0 and a binary float x, where that is rational and has at most
    _EXACT_BITS bits; else None.

    With x = p/q in lowest terms (q a power of two) and b = m·2**k (m odd), b ** x = (m**p · 2**(k·p)) ** (1/q) is
    rational exactly when every prime's exponent in m**p · 2**(k·p) is a multiple of q: q divides k (p is odd when
    q > 1) and m is a q-th power u**q. Then b ** x = u**p · 2**(k·p/q)."""
    p, q = x.numerator, x.denominator
    odd = b.numerator >> ((b.numerator & -b.numerator).bit_length() - 1)
    k = (b.numerator.bit_length() - odd.bit_length()) - (b.denominator.bit_length() - 1)
    if k % q:
        return None
    u = odd
    while q > 1 and u > 1:  # the q-th root of an odd number, q = 2**s: s square roots, each exact or none
        r = math.isqrt(u)
        if r * r != u:
            return None
        u, q = r, q // 2
    if u > 1 and q > 1:
        return None
    twos = k // x.denominator * p
    if abs(p) * u.bit_length() + abs(twos) > _EXACT_BITS:
        return None  # too many bits to be a float32 boundary: the decimal evaluation settles it
    return Fraction(u) ** p * Fraction(2) ** twos


def _power_settled(base: float, x: Fraction) -> Decimal:
    """An irrational (or many-bit) base ** x to as many digits as it takes: exp(x·ln base) with decimal's
    correctly rounded ln and exp at d digits is within |result|·(|x·ln base| + 1)·10**(2-d) of the exact value
    (the argument's two roundings, magnified by exp, and exp's own; a factor 10 to spare); once both ends of that
    interval round to the same float32, so does the exact value (rounding is monotone)."""
    b, digits = Decimal(base), _DIGITS + 10
    while digits <= _MOST_DIGITS:
        with decimal.localcontext(_with_digits(digits - _DIGITS)):
            t = Decimal(x.numerator) * b.ln() / Decimal(x.denominator)
            value = t.exp()
            err = value * (abs(t) + 1) * Decimal(10) ** (2 - digits)
            low, high = Fraction(value - err), Fraction(value + err)
        if f32_of_fraction(low) == f32_of_fraction(high):  # value > err > 0: no zeros of two signs here
            return value
        digits *= 2
    raise ArithmeticError(f"{base!r} ** {float(x)!r}: its float32 rounding was not settled with {_MOST_DIGITS} digits")
