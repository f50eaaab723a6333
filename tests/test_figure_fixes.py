"""Issue 24's "fix what misleads today": each figure tested by what it draws (its artists' data), not its pixels.

Each test names the defect it guards; each failed on the figures as they were before the fix."""

import argparse

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from zerosim.costs import GB  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def committed(name: str):
    """The figure `zerosim figures --only NAME` draws (and commits to figures/)."""
    from zerosim.cli.figures_cmd import FIGURES

    fig = FIGURES[name](argparse.Namespace(log=False))
    fig.canvas.draw()
    return fig


def no_two_texts_overlap(fig):
    fig.canvas.draw()
    boxes = [(t.get_text(), t.get_window_extent()) for ax in fig.axes for t in ax.texts if t.get_text().strip()]
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            assert not box_a.overlaps(box_b), f"labels overlap: {a!r} and {b!r}"


# -- 9. activation_strategies.png -------------------------------------------------------------------------------

@pytest.mark.slow  # six meta steps of the 7B shape (~5 s)
def test_activation_strategies_has_the_gpu_line_a_fitted_axis_and_says_why_selective_equals_flash():
    """Issue 24 #9: the axis ran to 100 GB for a 66 GB maximum, no GPU capacity line, selective = flash unexplained."""
    from zerosim.cli.figures_cmd import SEED001_7B
    from zerosim.costs.gpus import get_gpu
    from zerosim.costs.measured import strategy_costs

    fig = committed("activation_strategies")
    mem = fig.axes[0]
    (capacity,) = [line for line in mem.lines if line.get_gid() == "capacity"]
    assert capacity.get_xdata()[0] == get_gpu("h100-80gb").capacity / GB
    peaks = [p.get_width() for p in mem.patches if p.get_gid() == "kind:activations"]
    assert mem.get_xlim()[1] <= 1.1 * max(max(peaks), get_gpu("h100-80gb").capacity / GB)  # room for labels, no more
    # the note's numbers are the measured ones: flash keeps B·H·L·4 bytes a layer more than selective (its fp32
    # log-sum-exp per row), 32 layers × 4·32·2048·4 = 33,554,432 bytes; both recompute QKᵀ
    rows = {r["strategy"]: r for r in strategy_costs(4, 2048, **SEED001_7B)}
    gap = rows["flash"]["peak"] - rows["selective"]["peak"]
    assert gap == 32 * 4 * 32 * 2048 * 4
    (note,) = [t for t in fig.texts if t.get_gid() == "note"]
    text = note.get_text().replace("\n", " ")
    assert "selective and flash" in text and f"{gap / 1e6:.1f} MB more" in text
    assert f"+{100 * rows['selective']['extra']:.2f}%" in text and f"+{100 * rows['flash']['extra']:.2f}%" in text
    no_two_texts_overlap(fig)


# -- 8. spacing.png -------------------------------------------------------------------------------------------

def test_spacing_shows_fp16s_subnormal_step_and_where_it_flushes_to_zero():
    """Issue 24 #8: fp16's underflow side was off the plot (its line began at 1e-3, far above 2**-14)."""
    import numpy as np

    from zerosim.viz.spacing_figure import spacing_figure

    ax = spacing_figure()
    fp16 = next(line for line in ax.lines if line.get_gid() == "format:fp16")
    x, y = fp16.get_data()
    assert x.min() < 2.0**-23 and x.min() >= 2.0**-24  # down to the smallest subnormal, not below
    assert set(y[x < 2.0**-14]) == {2.0**-24}  # below the smallest normal the spacing is flat: one subnormal step
    # numpy's own fp16 says where values become 0: 2**-25 is a tie, and round-to-nearest-even picks 0; just above it
    # rounds up to the smallest subnormal 2**-24
    assert np.float16(2.0**-25) == 0 and np.float16(2.0**-25 * (1 + 2.0**-10)) == 2.0**-24
    marks = [line for line in ax.lines if line.get_gid() == "underflow:fp16"]
    assert min(min(m.get_xdata()) for m in marks) == 2.0**-25
    assert ax.get_xlim()[0] < 2.0**-25
    assert any(t.get_text() == "fp16: 0 at or below 2^-25" for t in ax.texts)
    no_two_texts_overlap(ax.figure)
