"""The kernels a model's arithmetic runs on, chosen in the precision policy (`MixedPrecision.arithmetic`): "portable"
(the default), whose products and functions give the same bits on every machine, or "native", the machine's own.

    from zerosim.precision.arithmetic import arithmetic_of
    ops = arithmetic_of(fmt)          # fmt: the compute format, which carries the policy's choice
    z = ops.matmul(x, w.T)            # the exact dot products rounded once to fp32 ("portable")
    e = ops.exp(s)                    # correctly rounded to fp32 ("portable")

    _kernels.py            Arithmetic and ARITHMETICS: each choice as a record of its kernels; arithmetic_of
    _exact_matmul.py       exact_matmul: each element the exact dot product rounded once, whatever BLAS sums it
    _gram.py               exact_gram: a @ a.T as exact_matmul makes it, each mirrored pair in doubt settled once
    _extents.py            a 16- or 8-bit operand's largest magnitude and quantum read from its bits; one bound
                           over whole operands that shows a small product exact in float64
    _norm_bound.py         an fp32 product by one float64 GEMM, its error bounded by the operands' norms
    _nonzero_lines.py      where a product's lines are nonzero, and the exact zeros that shows (a ReLU's dW)
    _twice_precise.py      the few elements in doubt summed to twice float64's precision, all at once
    _scratch.py            the float64 temporaries each thread reuses (no fresh pages per product)
    _operand_cache.py      a large operand widened and measured once per content (the ranks' gathered weights),
                           a small one's extent remembered, every rank's next operand measured together
                           (`Arithmetic.prepare`); `clear_kept_operands` empties it
    _rank_products.py      every rank's product by the same matrix made as one stacked product (`prepare`)
    _correctly_rounded.py  exp, log, tanh, sin, cos, power for float32 arrays, correctly rounded (a power's exact
                           ties to even); power_of_int: a float to an integer power (C++'s std::pow(float, n))
    _exact_values.py       their exact values (decimal, fractions) for the few arguments in doubt, imported by the
                           first one
    _nan.py                one canonical NaN per format in every portable kernel's output
    _round_once.py         the step both share: a float64 value known to within an error bound, rounded to float32
                           where the bound cannot change the rounding, and the rest marked for an exact evaluation

docs/portable_numbers.md: what moved between machines before, what each choice costs, what still depends on the
machine.
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._correctly_rounded": ("cos", "exp", "log", "power", "power_of_int", "rounded", "sin", "tanh"),
    "._exact_matmul": ("exact_matmul", "exact_sum_f32"),
    "._gram": ("exact_gram",),  # Newton-Schulz's alone
    "._kernels": ("ARITHMETICS", "Arithmetic", "arithmetic_of", "check_arithmetic", "clear_kept_operands"),
    "._operand_cache": ("used_once",),
    "._round_once": ("certain_f32", "f32_of_fraction"),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
