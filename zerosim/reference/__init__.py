"""The single-device oracle and the worked-example replay."""

from zerosim.reference.oracle import Reference

__all__ = ["Reference"]
