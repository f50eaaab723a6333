"""The ring explorer on real values (zerosim/explore/_ring.py): each hop's add, checked by hand.

Notebook 02's example: rank 0 holds 2048, ranks 1-3 hold 1. In NCCL's order the partial for chunk c starts at
rank c+1 and ends at rank c, each hop rounding to the wire format. fp16 spaces 2 apart at 2048 (11 significant
bits), bf16 16 apart (8 bits); ties go to even.
"""

import numpy as np
import pytest

from zerosim.explore import RingExplorer, hop_lines, ring_hops

pytest.importorskip("ipywidgets")


def test_fp16_2048_plus_ones_hop_by_hop_by_hand():
    h = ring_hops(2048, 1, "fp16")
    rows = {(r["step"], r["dst"]): (r["chunk"], r["received"], r["own"], r["kept"]) for r in h["rows"]}
    assert rows == {
        (0, 1): (3, 2048, 1, 2048),  # chunk 3 starts at rank 0: 2048 + 1 = 2049, a tie between 2048 and 2050 -> even
        (0, 2): (0, 1, 1, 2),  # chunk 0 starts at rank 1: 1 + 1 = 2, exact
        (0, 3): (1, 1, 1, 2),
        (0, 0): (2, 1, 2048, 2048),  # 1 + 2048 = 2049 -> 2048 again
        (1, 1): (2, 2048, 1, 2048),
        (1, 2): (3, 2048, 1, 2048),
        (1, 3): (0, 2, 1, 3),
        (1, 0): (1, 2, 2048, 2050),  # 2 + 2048 = 2050: representable, kept
        (2, 1): (1, 2050, 1, 2052),  # 2051: a tie between 2050 and 2052 -> 2052 (even mantissa)
        (2, 2): (2, 2048, 1, 2048),
        (2, 3): (3, 2048, 1, 2048),
        (2, 0): (0, 3, 2048, 2052),  # ((1 + 1) + 1) + 2048 = 2051 -> 2052
    }
    assert h["result"] == [2052, 2052, 2048, 2048] and h["exact"] == [2051] * 4
    assert [r["rounded"] for r in h["rows"]] == [r["kept"] != r["received"] + r["own"] for r in h["rows"]]
    assert sum("rounded" in line for line in hop_lines(h)) == 8


def test_bf16_rounds_every_add_at_2048_and_agrees_with_the_naive_twin():
    from zerosim.collectives import naive_reduce_scatter

    h = ring_hops(2048, 1, "bf16")
    assert h["result"] == [2048] * 4  # bf16's spacing at 2048 is 16: 2049, 2050, 2051 all round to 2048
    twin = naive_reduce_scatter(h["inputs"])  # gather everything, add in the ring's order
    assert [float(t[0]) for t in twin] == h["result"]
    assert np.all([r["kept"] in (2, 3, 2048) for r in h["rows"]])


def test_moving_the_sliders_recomputes_the_hops():
    ex = RingExplorer()
    assert ex.hops["result"] == [2052, 2052, 2048, 2048]
    ex.controls["big"].value = 1024  # fp16 spacing 1 at 1024: nothing rounds
    assert ex.hops["result"] == [1027] * 4 and not any(r["rounded"] for r in ex.hops["rows"])
    ex.controls["fmt"].value = "bf16"  # spacing 8 at 1024
    assert ex.hops["result"] == ring_hops(1024, 1, "bf16")["result"] == [1024] * 4


@pytest.mark.bad_input("explorers")
def test_a_format_the_explorer_does_not_have_is_refused():
    with pytest.raises(ValueError, match="fmt must be one of"):
        ring_hops(fmt="fp8")
