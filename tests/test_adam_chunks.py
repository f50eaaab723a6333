"""Adam's chunked seed step (zerosim/optim/adam_chunks.py) against its naive twin, the whole-shard expressions of
`Adam._update` (which run whenever intermediates are recorded): every bit of w, m and v, over several steps, at
every chunk boundary, with the values where rounding order shows (subnormals, ±0, huge, inf, NaN)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import bits

from zerosim.optim import Adam, AdamW
from zerosim.optim import adam_chunks


def _shard(n, dtype, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)).astype(dtype)
    g = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 5, n)).astype(dtype)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 3e38, -3e38], dtype)
    g[: min(n, special.size)] = special[: min(n, special.size)]  # where a reordered rounding would show
    return w, g


def _run(opt, w, g, steps, chunked):
    w = w.copy()
    state = {"m": np.zeros_like(w), "v": np.zeros_like(w)}
    for t in range(1, steps + 1):
        # record=None takes the chunked step; a record dict forces the whole-shard expressions (the naive twin)
        opt.step(w, g * (t % 3 + 1), state, t, None if chunked else {})
    return w, state


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 9, adam_chunks.CHUNK - 1, adam_chunks.CHUNK, adam_chunks.CHUNK + 1,
                               2 * adam_chunks.CHUNK + 17])
@pytest.mark.parametrize("opt", [Adam(lr=1e-3), Adam(lr=0.3, betas=(0.5, 0.75), eps=1e-3), AdamW(lr=1e-2)])
def test_chunked_seed_step_gives_the_whole_shard_bits(opt, n, dtype):
    w, g = _shard(n, dtype, n)
    assert adam_chunks.applies(w, g, {"m": w, "v": w})
    with np.errstate(all="ignore"):
        w_fast, s_fast = _run(opt, w, g, 4, chunked=True)
        w_naive, s_naive = _run(opt, w, g, 4, chunked=False)
    assert np.array_equal(bits(w_fast), bits(w_naive))
    for k in ("m", "v"):
        assert np.array_equal(bits(s_fast[k]), bits(s_naive[k])), k


def test_small_chunks_cut_anywhere_give_the_same_bits(monkeypatch):
    w, g = _shard(1000, np.float32, 7)
    with np.errstate(all="ignore"):
        want, _ = _run(Adam(lr=1e-2), w, g, 3, chunked=False)
        for chunk in (1, 7, 64, 999, 1000, 4096):
            monkeypatch.setattr(adam_chunks, "CHUNK", chunk)
            got, _ = _run(Adam(lr=1e-2), w, g, 3, chunked=True)
            assert np.array_equal(bits(got), bits(want)), chunk


def test_what_the_chunked_step_does_not_take_goes_the_whole_shard_way():
    w = np.ones(8, np.float32)
    assert not adam_chunks.applies(w[::2], w[::2], {})  # strided
    assert not adam_chunks.applies(w, w.astype(np.float64), {})  # mixed dtypes
    assert not adam_chunks.applies(w.astype(np.float16), w.astype(np.float16), {})  # not float32/float64
    assert not adam_chunks.applies(w.reshape(2, 4), w.reshape(2, 4), {})  # not 1-D
