"""Planted bug 'divides in 16 bits' of exercise average_dtype (withheld: assignment 2 grades it)."""
import numpy as np


def average(summed, world_size):
    return (summed / world_size).astype(np.float32)
