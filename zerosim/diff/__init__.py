"""zerosim diff: why do two runs differ? (work in progress)"""

from zerosim.diff._diff import diff

__all__ = ["diff"]
