"""Transformer Engine's DelayedScaling with a NaN amax (issue 33, Build 5): TE 2.18's fused update
(transformer_engine/common/recipe/delayed_scaling.cu: amax_and_scale_update_impl::kernel_bulk) takes the history's
amax as `amax = fmaxf(amax, a)` from amax = 0, and CUDA's fmaxf returns the other operand when one is NaN: a NaN in
the history is skipped (and kept in its slot until it rolls out), not allowed to freeze the scale for L steps."""

import numpy as np
import pytest

from zerosim.precision.quantize import DelayedScaling

NAN = float("nan")

# L = 4, e4m3 forward (max 448), one amax a step (recorded, then the same value as the reduced amax). By hand:
# step  amax   the rolled window a_i = [h1, h2, h3, last]   TE's amax (fmaxf, NaN skipped)   S = 448 / amax
#  1    1.0    [0, 0, 0, 1]                                  1                                 448
#  2    NaN    [0, 0, 1, NaN]                                1                                 448
#  3    4.0    [0, 1, NaN, 4]                                4                                 112
#  4    0.5    [1, NaN, 4, 0.5]                              4                                 112
#  5    0.5    [NaN, 4, 0.5, 0.5]                            4                                 112
#  6    0.5    [4, 0.5, 0.5, 0.5]                            4                                 112
#  7    0.5    [0.5, 0.5, 0.5, 0.5]                          0.5                               896
# (numpy's max would give NaN at steps 2-5 and keep S = 448 through step 5: the frozen scale of the issue.)
AMAXES = [1.0, NAN, 4.0, 0.5, 0.5, 0.5, 0.5]
TE_MAX = [448.0, 448.0, 112.0, 112.0, 112.0, 112.0, 896.0]
# most_recent: amax = last; a NaN is not finite, so that step keeps the scale (`else scale = p.param[bid].scale`)
TE_MOST_RECENT = [448.0, 448.0, 112.0, 896.0, 896.0, 896.0, 896.0]


@pytest.mark.parametrize("algo, want", [("max", TE_MAX), ("most_recent", TE_MOST_RECENT)])
def test_a_nan_amax_is_skipped_as_fmaxf_skips_it(algo, want):
    recipe = DelayedScaling(amax_history_len=4, amax_compute_algo=algo)
    got = []
    for a in AMAXES:
        recipe.record("forward", a)
        got.append(recipe.update("forward", a).scale_after)
    assert got == want


def test_the_nan_stays_in_its_slot_until_it_rolls_out():
    """TE writes `amax_history[i] = a` for the rolled a, NaN or not: it is in the history for L - 1 more steps."""
    recipe = DelayedScaling(amax_history_len=4)
    for a in AMAXES[:3]:
        recipe.record("forward", a)
        recipe.update("forward", a)
    h = recipe.history[0]
    assert h[0] == 0 and h[1] == 1 and np.isnan(h[2]) and h[3] == 4


def test_a_history_of_nothing_but_nan_keeps_the_scale():
    """fmaxf(0, NaN) = 0: not > 0, so the scale stays (TE's case 4: "No action is possible")."""
    recipe = DelayedScaling(amax_history_len=1)
    recipe.update("forward", 2.0)
    assert recipe.update("forward", NAN).scale_after == np.float32(224.0)
