"""Small pieces of text the memory reports' formats share (memory_format.py and the tensor, context and pipeline
formats beside it): when the ledgers were read, a byte count that may not have been measured, and why ZeRO-3's
bytes differ from the formula's."""

from __future__ import annotations

GB = 1e9


def when_measured(r: dict) -> str:
    """When the report's ledgers were read: after one step, or after initialisation (`zerosim memory --no-step`)."""
    return "after one step" if r["step"] else "after initialisation"


def gb_or_dash(nbytes: float | None, width: int, digits: int) -> str:
    """`nbytes` in GB right-aligned in `width`, or a dash where nothing was measured (None: no step was run)."""
    return f"{'—':>{width}s}" if nbytes is None else f"{nbytes / GB:{width}.{digits}f}"


def stage3_cause(more: bool) -> str:
    """Why ZeRO-3's trace sends more (`more`) or less than its formula (3Ψ: a forward's and a backward's gathers and
    the reduce-scatter): a schedule that gathers a unit for every use (seed 004's) gathers it again for
    checkpointing's recompute; one that keeps a unit gathered until its next use (DeepSpeed's
    stage3_max_reuse_distance) gathers it once for forward and backward. (FSDP's frees a unit after each use but
    prefetches the next, so a recompute and its backward share one gather: 3Ψ either way. parallel/data/_fetch.py.)"""
    if more:
        return ("each unit its recompute reads is gathered again (a schedule that gathers for every use, seed 004's: "
                "a checkpointed block's recompute and backward are two uses)")
    return ("a unit kept gathered from its forward to its backward is not gathered again (DeepSpeed keeps a unit "
            "used again within stage3_max_reuse_distance elements, up to stage3_max_live_parameters)")
