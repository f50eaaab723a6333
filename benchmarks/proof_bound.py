"""The least any NumPy proof of an fp32 product can cost a step, against the portable step and its floor, in turns.

benchmarks/portable_step.py --floor measures the floor of the portable design: every product a float64 GEMM rounded
once, no proof. A proof must at least also read the operands' norms (its error bound) and look at every element of c:
NumPy cannot test a predicate on c without writing an array, so one ufunc pass over c that writes a byte an element
and one reduction over that byte. `bound_matmul` is exactly that, on top of the floor with its operands widened as
the kernel widens them (its test, c > E, proves nothing: only its cost counts). Five engines step in turns, each
round in a new seeded order, CPU time of this process (BLAS on one thread), median of --repeats after a warm-up
round, each ÷ native with the quartiles of the rounds' own ratios:

    native    the machine's sgemm
    floor     benchmarks/peers.py `floor_step`: its operands widened as the kernel widens them
    bound     the floor plus the norms and the cheapest per-element test (`bound_matmul`)
    two       the floor plus the norms and the least test NumPy can decide (`two_matmul`, below)
    form      the floor plus the norms and the present proof's first test, no suspect settled (`form_matmul`)
    portable  the default engine: every product proved

If bound ÷ native is above issue 63's 1.5, no NumPy proof reaches the target at that size; portable - bound is what
the present proof spends beyond the least any could (its second rounding of c, the suspects found and settled).

"bound" is a lower bound no proof can reach: no one NumPy call over c decides whether [c - E, c + E] holds a float32
rounding boundary. The boundaries lie half a float32 ulp apart, an ulp that doubles with each binade of c, and E
differs by row, so the test is not a comparison of c with a broadcast value (monotone in c), nor a bit test of c's
float64 bits against a broadcast mask (which bits lie within E of the boundary depends on c's binade), nor a casting
comparison of c with itself (`np.not_equal(x, y, signature=("f4", "f4", "?"))` needs c + E as an array of its own).
"two" is the least that does decide it: c rounded into the output, as the floor rounds it (a proof with -E folded
into its GEMM, as a column of a and a row of ones in b, would get c - E there at that cost; here the fold's wider GEMM
is free), c + 2E rounded (one float64 add with a cast), their bits compared, the comparison's `any`, and the scan of a
block that holds a suspect for where they lie. A proof must scan nearly every block: on the steps of `--cases`' MLPs,
suspects that are no exact zero (those left after the present proof's tests of zeros, before its per-element norms)
lie in 58-63 of each step's 64 blocks at 919k / N = 8 and in 292-310 of 320 at 10M / N = 4 (the second to fourth
steps), so scanning every block that holds any of its suspects over-states what the scans must cost by at most a
tenth. "two" settles none of them.

    python benchmarks/proof_bound.py [--repeats 9] [--cases 919k:8,10M:4]
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/peers.py, however this file is run
from peers import BATCH, MODELS, floor_matmul, floor_step, forget_kept_operands, measured_tree  # noqa: E402
from portable_step import engines, tidy  # noqa: E402
from trees import quartiles, rounds  # noqa: E402

from zerosim.precision.arithmetic._scratch import scratch  # noqa: E402  (the kernel's reused buffers)


def _least(block, low, e) -> None:
    """The floor's rounding, and what any proof does at the least: one ufunc pass over c writing a byte an element
    (c > E proves nothing: only its cost counts) and one reduction over it."""
    flag = scratch(block.shape, 5, np.bool_)
    np.copyto(low, block, casting="unsafe")
    np.greater(block, e, out=flag)
    flag.any()


def _two(block, low, e) -> None:
    """The least test NumPy can decide (the module docstring): c rounded into the output as the floor rounds it,
    c + 2E rounded, their bits compared, the comparison's `any`, and the scan of a block that holds a suspect."""
    high, flag = scratch(block.shape, 4, np.float32), scratch(block.shape, 5, np.bool_)
    np.copyto(low, block, casting="unsafe")
    np.add(block, 2 * e, out=high, dtype=np.float64, casting="unsafe")
    np.not_equal(low.view(np.uint32), high.view(np.uint32), out=flag)
    if flag.any():
        np.flatnonzero(flag)


def _form(block, low, e) -> None:
    """The present proof's first test (_norm_bound.py `rounded_by_norms`): c - E rounded into the output, c + E
    rounded, their bits compared, the comparison's `any`, and the scan for its suspects that a block with any makes;
    none of them mended (they stay c - E rounded) or settled."""
    high, flag = scratch(block.shape, 4, np.float32), scratch(block.shape, 5, np.bool_)
    np.subtract(block, e, out=low, dtype=np.float64, casting="unsafe")
    np.add(block, e, out=high, dtype=np.float64, casting="unsafe")
    np.not_equal(low.view(np.uint32), high.view(np.uint32), out=flag)
    if flag.any():
        np.flatnonzero(flag)


TESTS = {"least": _least, "two": _two, "form": _form}


def bound_matmul(a, b, out=None, test: str = "least"):
    """`floor_matmul` with each block of rows, as the kernel tests them, rounded and tested by `TESTS[test]`: the floor
    plus both operands' norms and that test. Its bits are the floor's, but for "form"'s suspects (c - E rounded)."""
    return floor_matmul(a, b, out, TESTS[test])


def two_matmul(a, b, out=None):
    """`bound_matmul` with the least test NumPy can decide (peers.py `--arithmetic two` steps with it)."""
    return floor_matmul(a, b, out, _two)


def form_matmul(a, b, out=None):
    """`bound_matmul` with the present proof's first test: what that form costs at the least, before any suspect is
    settled."""
    return floor_matmul(a, b, out, _form)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=rounds, default=9)
    p.add_argument("--cases", default="919k:8,10M:4", help="MODEL:N,... (MODEL: 919k or 10M)")
    args = p.parse_args()
    from zerosim.models import make_regression

    print(f"zerosim from {measured_tree()}; load average before {os.getloadavg()[0]:.2f}")
    print(f"{'case':>8} {'native ms':>9}  floor, bound, two, form, portable ÷ native (medians; q1-q3 of the "
          f"rounds' own ratios)")
    for case in args.cases.split(","):
        name, n = case.split(":")
        widths, n = MODELS[name], int(n)
        batches = make_regression(np.random.default_rng(0), n, BATCH, widths)
        runs = engines(widths, n, "fp32", floor=True)
        runs["bound"] = engines(widths, n, "fp32")["portable"]
        runs["two"] = engines(widths, n, "fp32")["portable"]
        runs["form"] = engines(widths, n, "fp32")["portable"]
        steps = {"native": lambda: runs["native"].step(batches),
                 "portable": lambda: runs["portable"].step(batches),
                 "floor": lambda: floor_step(runs["floor"], batches),
                 "bound": lambda: floor_step(runs["bound"], batches, bound_matmul),
                 "two": lambda: floor_step(runs["two"], batches, two_matmul),
                 "form": lambda: floor_step(runs["form"], batches, form_matmul)}
        cpu, order = {a: [] for a in steps}, random.Random(0)
        for round_ in range(args.repeats + 1):  # round 0 warms up
            names = list(steps)
            order.shuffle(names)
            for a in names:
                forget_kept_operands()
                start = time.process_time()
                losses = steps[a]()
                if round_:
                    cpu[a].append(time.process_time() - start)
                tidy(runs, a, losses)
        native = statistics.median(cpu["native"])
        cells = []
        for a in ("floor", "bound", "two", "form", "portable"):
            q1, q3 = quartiles(sorted(x / y for x, y in zip(cpu[a], cpu["native"])))
            cells.append(f"{statistics.median(cpu[a]) / native:.2f} ({q1:.2f}-{q3:.2f})")
        print(f"{case:>8} {native * 1e3:>9.1f} " + "  ".join(cells), flush=True)
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
