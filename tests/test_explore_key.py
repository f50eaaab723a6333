"""The explorer's legend (explore/_key.py) against matplotlib's own `Axes.legend` with the same entries: the same
labels and handles, column by column, each where matplotlib puts it across and in its column, a column as a whole
within a fifth of an em (matplotlib aligns the two columns by their rows' hinted descents); kept in points, so a
figure drawn at another dpi keeps its layout."""

from __future__ import annotations

import numpy as np
import pytest

from zerosim.explore import ExplorerCanvas, Settings, explore
from zerosim.viz import kind_colour, kind_label

SETTINGS = [Settings(), Settings(stage=2, offload="optimizer-cpu"), Settings(model="gpt2-small", ranks=4, stage=0,
                                                                             seq_len=512)]


def key_parts(canvas):
    texts = [a for a in canvas.key.artists if hasattr(a, "get_text")]
    handles = [a for a in canvas.key.artists if not hasattr(a, "get_text")]
    return texts, handles


@pytest.mark.parametrize("s", SETTINGS, ids=["zero3", "offload", "gpt2-zero0"])
def test_the_key_lists_what_matplotlibs_legend_lists_where_it_lists_it(s):
    canvas = ExplorerCanvas()
    n = explore(s)
    canvas.update(n)
    canvas.png()
    fig, renderer = canvas.figure, canvas.figure.canvas.get_renderer()
    kinds, capacity = canvas._legend
    # what it lists: each kind held at the peak or on the host, in the panel's order, then the capacity line
    held = {k for k, v in n["at_peak"].items() if v} | {k for k, v in n["host"]["host"]["resting"].items() if v}
    assert set(kinds) == held and capacity.startswith(n["gpu"])
    texts, handles = key_parts(canvas)
    assert [t.get_text() for t in texts] == [kind_label(k) for k in kinds] + [capacity]
    for k, h in zip(kinds, handles):
        assert h.get_facecolor() == pytest.approx(matplotlib_rgba(kind_colour(k)))
    assert handles[-1].get_linestyle() == "--"
    # where: matplotlib's legend of the same entries, drawn on the same figure
    bars = [canvas.bars[k][0] if canvas.bars[k][0].get_visible() else canvas.bars[k][2] for k in kinds]
    legend = canvas.mem.legend(bars + [canvas.capacity], [kind_label(k) for k in kinds] + [capacity],
                               fontsize=canvas.fontsize - 1, frameon=False, loc="upper left", bbox_to_anchor=(0, -0.1),
                               ncol=2)
    fig.canvas.draw()
    em = (canvas.fontsize - 1) * fig.dpi / 72
    rows = -(-len(texts) // 2)
    shifts = {0: set(), 1: set()}  # each column's offset up or down from matplotlib's
    for i, (mine, theirs) in enumerate(zip(texts + handles, list(legend.get_texts()) + list(legend.legend_handles))):
        offset = mine.get_window_extent(renderer).extents - theirs.get_window_extent(renderer).extents
        assert np.abs(offset[[0, 2]]).max() < 1e-9, (mine, offset)  # across: the same hinted widths
        assert abs(offset[1] - offset[3]) < 1e-9, (mine, offset)  # the same height
        shifts[int(i % len(texts) >= rows)].add(round(offset[1], 9))
    # within a column, every row where matplotlib puts it relative to the others; the column as a whole within a
    # fifth of an em (matplotlib aligns the two columns by their rows' descents)
    assert all(len(v) == 1 and abs(next(iter(v))) < em / 5 for v in shifts.values()), shifts
    # column by column, the first the longer: one x per column, each row below the last
    xs = [t.get_window_extent(renderer).x0 for t in texts]
    ys = [t.get_position()[1] for t in texts]
    assert len(set(xs[:rows])) == 1 and len(set(xs[rows:])) == 1 and xs[rows] > xs[0]
    assert all(np.diff(ys[:rows]) < 0) and all(np.diff(ys[rows:]) < 0)


def matplotlib_rgba(colour):
    from matplotlib.colors import to_rgba

    return to_rgba(colour)


def test_the_key_keeps_its_layout_in_points_at_another_dpi():
    canvas = ExplorerCanvas()
    canvas.update(explore(Settings()))
    fig = canvas.figure
    at = {}
    for dpi in (100, 200):
        fig.set_dpi(dpi)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        texts, handles = key_parts(canvas)
        # the handles' corners, in points from the figure's lower left: exact arithmetic on the same points
        at[dpi] = np.array([h.get_window_extent(renderer).extents for h in handles]) * 72 / dpi
    assert np.allclose(at[100], at[200], atol=1e-9)


def test_a_new_content_replaces_the_old_entries():
    canvas = ExplorerCanvas()
    canvas.update(explore(Settings()))
    first = list(canvas.key.artists)
    canvas.update(explore(Settings(stage=2, offload="optimizer-cpu")))
    assert all(a.figure is None for a in first if a not in canvas.key.artists)  # removed from the figure
    assert len([a for a in canvas.figure.artists if hasattr(a, "get_text")]) == len(key_parts(canvas)[0])
