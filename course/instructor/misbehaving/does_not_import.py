"""A submission that imports a module no machine has."""
import numpy_but_faster  # noqa: F401


def ring_reduce_scatter(xs, wire):
    return xs
