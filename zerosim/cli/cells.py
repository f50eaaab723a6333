"""Small pieces of text the memory reports' formats share (memory_format.py and the tensor, context and pipeline
formats beside it): when the ledgers were read, and a byte count that may not have been measured."""

from __future__ import annotations

GB = 1e9


def when_measured(r: dict) -> str:
    """When the report's ledgers were read: after one step, or after initialisation (`zerosim memory --no-step`)."""
    return "after one step" if r["step"] else "after initialisation"


def gb_or_dash(nbytes: float | None, width: int, digits: int) -> str:
    """`nbytes` in GB right-aligned in `width`, or a dash where nothing was measured (None: no step was run)."""
    return f"{'—':>{width}s}" if nbytes is None else f"{nbytes / GB:{width}.{digits}f}"
