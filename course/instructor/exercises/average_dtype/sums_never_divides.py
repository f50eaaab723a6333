"""Planted bug 'sums, never divides' of exercise average_dtype (withheld: assignment 2 grades it)."""
import numpy as np


def average(summed, world_size):
    return summed.astype(np.float32)
