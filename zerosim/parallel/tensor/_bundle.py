"""What travels between tensor-parallel units: the residual stream beside the value a unit hands on.

Letters: B batch, L sequence length, T the TP degree, d model width.

Megatron's collectives fall inside a transformer sub-block (core/tensor_parallel/mappings.py: `f` between the norm
and the column-parallel GEMM, `g` between the row-parallel GEMM and the residual add), and zerosim's step calls a
parallelism only between units (parallel/_contract.py). So a TP sub-block is cut at its collectives (the norm | the
column-to-row region | the bias and residual add) and the residual stream x crosses the cut beside the value being
reduced: `Bundle(residual=x, value=partial)`. The unit after the collective adds them, as Megatron's
`bias_dropout_add` does after RowParallelLinear's reduce.

    forward   Bundle(residual, value)               x (B, L, d) [(B, L/T, d) with SP] beside h, p or s
    backward  Bundle(residual, value[, input])      their gradients; with SP also the column-parallel GEMM's input,
                                                    all-gathered again for its weight gradient (Megatron's
                                                    LinearWithGradAccumulationAndAsyncCommunication.backward)

A bundle answers what the step asks of the activation in flight (models/_run.py, `Pass`): `shape` is the value's,
the shape the unit computes on; `nbytes` counts every part; `snapshot()` copies them for narration.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from zerosim._dataclass import dataclass


@dataclass(frozen=True)
class Bundle:
    """The residual stream (`residual`), the value a unit hands on (`value`), and (backward with SP) the input a
    column-parallel unit needs again (`input`)."""

    residual: object  # (B, L, d) or (B, L/T, d): x, or its gradient
    value: object  # (B, L', d'): the norm's output, a partial sum, a reduced sum, or their gradients
    input: object = None  # (B, L, d) the gathered input of a column-parallel GEMM (backward, sequence parallel)

    @property
    def shape(self) -> tuple:
        return tuple(self.value.shape)

    @property
    def dtype(self):
        return self.value.dtype

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in (self.residual, self.value, self.input) if a is not None)

    def with_value(self, value) -> "Bundle":
        return replace(self, value=value)

    def with_parts(self, residual, value) -> "Bundle":
        """This bundle with a new residual and value (a collective's results), its input kept: made directly, as
        `dataclasses.replace` would make it in ~2.5x the time (tensor parallelism's every side on every rank)."""
        return Bundle(residual, value, self.input)

    def snapshot(self) -> dict:
        """Copies of the parts, by name (what a narration keeps of an op's output)."""
        return {k: np.array(a) for k, a in (("residual", self.residual), ("value", self.value), ("input", self.input))
                if a is not None}
