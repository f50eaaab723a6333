"""ZeRO engines: stage 0 (plain data parallel), 1 (optimizer state), 2 (+ gradients), 3 (+ params)."""

from zerosim.zero.engine import ZeroEngine
from zerosim.zero.flat import FlatLayout

__all__ = ["FlatLayout", "ZeroEngine"]
