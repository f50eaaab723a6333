"""Rates a predicted time divides by, checked where they are born: a NaN, an infinity, zero or a negative rate is
refused naming it (a Link's bandwidth, a Device's peaks, an Efficiency's fractions, compute_time's rate), and the
command line's rates must lie between physical bounds (below, a time of 300 digits is printed as if it meant something).

    check_rate(450e9, "bandwidth")                          # a finite number > 0, or a ValueError naming it
    check_count(8, "ranks")                                  # a whole number >= 1 (the formulas' N, Ψ, buckets)
    check_flag_range(1e-300, "--link-bandwidth", LINK_GB_S)  # the flag's physical bounds, said in the error

The API keeps any positive finite rate (the tests' unit devices run at 1 FLOP/s and 1 B/s, to make times exact);
only the flags, which stand for real hardware, have floors and ceilings.
"""

from __future__ import annotations

import math
import numbers
from zerosim._dataclass import dataclass


@dataclass(frozen=True)
class Bounds:
    """A flag's physical range, with the reason for each end."""

    low: float
    high: float
    unit: str
    why: str


# --link-bandwidth, --inter-link-bandwidth, --host-bandwidth, in GB/s per direction. Floor 1e-3 GB/s = 1 MB/s: below
# 10 Mbit/s Ethernet's 1.25 MB/s, the slowest wired link still sold; ceiling 1e6 GB/s = 1 PB/s, over 500 times an
# NVLink 5 GPU's 1.8 TB/s. Past either end a time means nothing.
LINK_GB_S = Bounds(1e-3, 1e6, "GB/s", "1 MB/s is slower than 10 Mbit/s Ethernet; 1 PB/s is 500 times NVLink 5")
# --link-alpha, --inter-link-alpha, --call-latency, in µs. 0 is an ideal link; a second per ring step (1e6 µs) is
# longer than a geostationary satellite's round trip (~0.6 s): no network in a cluster is slower.
LATENCY_US = Bounds(0.0, 1e6, "µs", "a second a step is slower than a satellite link")
# --efficiency (a fraction of the datasheet peaks, and each override). Floor 1e-3: 0.1 % of an H100's 989 TFLOPS is
# about one server CPU socket's peak, slower than the host the GPU sits in; published training runs sit at tens of
# per cent (analysis/costs/_validation_points.py). Ceiling 1: the datasheet peak itself.
EFFICIENCY = Bounds(1e-3, 1.0, "of peak", "0.1 % of a GPU's peak is slower than its host CPU")


def check_rate(value, name: str, ideal: bool = False) -> float:
    """`value` as a rate: a finite real number > 0 (not a bool), else a ValueError naming `name`; with `ideal`, inf too
    (a link that moves any bytes in no time: what a test of compute alone builds, never a flag's value)."""
    real = not isinstance(value, bool) and isinstance(value, numbers.Real)
    if not (real and (0 < value < math.inf or (ideal and value == math.inf))):
        raise ValueError(f"{name} must be a {'' if ideal else 'finite '}number > 0, got {value!r}")
    return value


def check_latency(value, name: str) -> float:
    """`value` as a latency in seconds: a finite real number >= 0, else a ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (0 <= value < math.inf):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def check_count(value, name: str, minimum: int = 1) -> int:
    """`value` as a count (ranks, buckets, parameters): a whole number >= `minimum` (not a bool, NaN or 1.5)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or value != int(value) or value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def check_flag_range(value, flag: str, bounds: Bounds, low_open: bool = False) -> float:
    """A flag's number within `bounds` (finite; `low_open`: strictly above the floor), else a ValueError naming the
    flag, the bounds and why."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and (
        bounds.low < value if low_open else bounds.low <= value) and value <= bounds.high
    if not ok:
        raise ValueError(f"{flag} must lie between {bounds.low:g} and {bounds.high:g} {bounds.unit}, got {value!r} "
                         f"({bounds.why})")
    return value
