"""The bytes a context-parallel attention record says it holds (`Ring.nbytes`, `RingGrad.nbytes`): every array part,
nested tuples of them too, counted by hand below. The step logs them as the bytes an op reads and writes
(models/_run.py `Pass.run`), so a part left out would quietly cheapen a hop's memory traffic."""

import numpy as np
from ml_dtypes import bfloat16 as BF16

from zerosim.parallel.context import Ring, RingGrad
from zerosim.precision.cast import MetaArray


def _bf16(*shape):
    return np.zeros(shape, BF16)


def test_ring_counts_every_array_part_by_hand():
    ring = Ring(
        residual=np.zeros((2, 4, 8), np.float32),  # 2·4·8·4 = 256 B
        q=_bf16(2, 2, 4, 4),  # 64 elements · 2 = 128 B
        kv=(_bf16(2, 1, 4, 4), _bf16(2, 1, 4, 4)),  # 2 · 32 · 2 = 128 B
        held=(_bf16(2, 1, 4, 4), _bf16(2, 1, 4, 4)),  # 128 B
        incoming=None,  # nothing on its way: 0
        work=(2, 2, 4, 4, 4),  # shapes, not arrays: 0
        # ((out_i, lse_i, rows), ...): out 64 · 2 = 128 B, lse (2, 2, 4) fp32 = 64 B, rows an int: 0; twice
        steps=((_bf16(2, 2, 4, 4), np.zeros((2, 2, 4), np.float32), 4),
               (_bf16(2, 2, 4, 4), np.zeros((2, 2, 4), np.float32), 4)),
        lse=np.zeros((2, 2, 4), np.float32),  # 64 B
    )
    assert ring.nbytes == 256 + 128 + 128 + 128 + 2 * (128 + 64) + 64
    assert ring.nbytes == 1088
    # snapshot names the same parts, flattened in field order, each by its place among the tuple's flattened items
    # (the rows, 4, are items 2 and 5 of `steps` and no arrays)
    assert list(ring.snapshot()) == ["residual", "q", "kv[0]", "kv[1]", "held[0]", "held[1]", "steps[0]",
                                     "steps[1]", "steps[3]", "steps[4]", "lse"]


def test_ring_grad_counts_nested_pieces_and_data_less_parts():
    grad = RingGrad(
        residual=MetaArray((2, 4, 8), np.float32),  # data-less: 256 B all the same
        do=_bf16(2, 2, 4, 4),  # 128 B
        o=_bf16(2, 2, 4, 4),  # 128 B
        lse=np.zeros((2, 2, 4), np.float32),  # 64 B
        q=_bf16(2, 2, 4, 4),  # 128 B
        dkv=((np.zeros((2, 1, 4, 4), np.float32), None), (None, np.zeros((2, 1, 4, 4), np.float32))),  # 2 · 128 B
        dq=np.zeros((2, 2, 4, 4), np.float32),  # 256 B
    )
    assert grad.nbytes == 256 + 128 + 128 + 64 + 128 + 2 * 128 + 256
    assert grad.nbytes == 1216
