"""The explorer's kept text pixels (explore/_text_raster.py) against matplotlib rasterising every text: a figure drawn
over and over, its axes rasterised anew each time (the worst case: a slider move that changes limits and legend),
gives the same pixels as one that never keeps a text."""

from __future__ import annotations

import io

import numpy as np
from matplotlib.image import imread

from zerosim.explore import ExplorerCanvas, Settings, explore

PATH = [{}, {"stage": 0}, {"stage": 3}, {"ranks": 16}, {"checkpoint": "none"}, {"stage": 1}, {"micro_batch": 2},
        {"model": "gpt2-small"}, {"stage": 3}, {"stage": 0}]


def test_kept_texts_give_the_pixels_matplotlib_gives():
    kept, plain = ExplorerCanvas(), ExplorerCanvas(text_raster=False)
    s = Settings(model="gpt2-small", ranks=8, seq_len=512)
    for move in PATH:
        s = s.with_(**move)
        n = explore(s)
        for canvas in (kept, plain):
            canvas.forget_backgrounds()  # every text drawn again: tick labels, axis labels, legend, titles
            canvas.update(n)
        got, want = (imread(io.BytesIO(c.png())) for c in (kept, plain))
        assert np.array_equal(got, want), move
    text = kept.figure.canvas.get_renderer().zerosim_text
    assert text.hits > text.misses > 0  # most texts came back at their place


def test_a_text_over_colour_is_drawn_by_matplotlib_not_pasted():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from zerosim.explore._text_raster import TextRaster

    def drawn(keep: bool, colour: str):
        fig = Figure(figsize=(2, 1), dpi=100)
        FigureCanvasAgg(fig)
        fig.text(0.2, 0.4, "ZeRO-3 fits", fontsize=9)
        renderer = fig.canvas.get_renderer()
        text = TextRaster(renderer) if keep else None
        fig.canvas.draw()  # on white: drawn as usual
        fig.canvas.draw()  # again: kept (and pasted)
        fig.patch.set_facecolor(colour)
        fig.canvas.draw()  # the same text at the same place, over colour
        return np.asarray(fig.canvas.buffer_rgba()).copy(), text

    (got, text), (want, _) = drawn(True, "#f28e2b"), drawn(False, "#f28e2b")
    assert text.misses == 2 and text.hits == 1 and np.array_equal(got, want)


def figure_with(texts: list, keep: bool, size=(3, 2)):
    """A small Agg figure holding `texts` ((x, y, string, kwargs) in figure fractions), with a TextRaster if `keep`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from zerosim.explore._text_raster import TextRaster

    fig = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(fig)
    for x, y, s, kwargs in texts:
        fig.text(x, y, s, **kwargs)
    return fig, (TextRaster(fig.canvas.get_renderer()) if keep else None)


TEXTS = [(0.1, 0.85, "ZeRO-3: W/G/OS sharded (gy)", {"fontsize": 9}),
         (0.05, 0.1, "GB on rank 0", {"fontsize": 9, "rotation": 90}),
         (0.55, 0.3, "peak 16.85 GB", {"fontsize": 10, "rotation": 30, "family": "serif"}),
         (0.2, 0.55, "fits,\nwith room", {"fontsize": 10, "family": "serif", "style": "italic"}),
         (0.2, 0.1, "ms per step", {"fontsize": 7.5, "family": "monospace", "weight": "bold"})]


def test_kept_texts_at_any_angle_and_font_give_matplotlibs_pixels():
    """Turned, multi-line, serif, monospace and bold texts: kept at their second draw (each box found from its own
    metrics, turned by its angle) and pasted at their third, pixel for pixel what matplotlib draws."""
    (fig, text), (plain, _) = figure_with(TEXTS, True, (4, 3)), figure_with(TEXTS, False, (4, 3))
    for _ in range(3):
        fig.canvas.draw()
        plain.canvas.draw()
        assert np.array_equal(np.asarray(fig.canvas.buffer_rgba()), np.asarray(plain.canvas.buffer_rgba()))
    lines = 6  # one draw_text per line
    assert len(text.kept) == lines and text.hits == lines and text.misses == 2 * lines


def test_a_text_whose_glyphs_reach_past_its_window_is_not_kept(monkeypatch):
    """Where the window a text's metrics give is too small for its glyphs (here: metrics that say half its width),
    it is drawn, not kept: a kept box cut at the window's edge would paste half a text."""
    from zerosim.explore import _text_raster

    real = _text_raster._metrics
    monkeypatch.setattr(_text_raster, "_metrics", lambda r, s, p: (real(r, s, p)[0] / 2, *real(r, s, p)[1:]))
    (fig, text), (plain, _) = figure_with(TEXTS[:1], True), figure_with(TEXTS[:1], False)
    for _ in range(3):
        fig.canvas.draw()
        plain.canvas.draw()
    assert np.array_equal(np.asarray(fig.canvas.buffer_rgba()), np.asarray(plain.canvas.buffer_rgba()))
    assert text.kept == {} and text.hits == 0


def test_the_font_height_hook_gives_the_layout_matplotlib_computes():
    """`TextRaster.font_height_metrics` hands matplotlib's text layout the numbers it would read from the font's
    tables itself (matplotlib 3.11 text.py `Text._get_layout`): every text's box the same, to the bit, with the hook
    and without, over fonts, sizes, weights, angles and lines."""
    import matplotlib

    texts = TEXTS + [(0.2, 0.3, "a\nbb\nccc", {"fontsize": s, "family": f, "linespacing": ls})
                     for s in (6, 9, 13.7) for f in ("sans-serif", "serif", "monospace") for ls in (1.2, "normal")
                     if ls == 1.2 or tuple(map(int, matplotlib.__version__.split(".")[:2])) >= (3, 11)]
    (fig, text), (plain, _) = figure_with(texts, True), figure_with(texts, False)
    assert fig.canvas.get_renderer()._get_font_height_metrics == text.font_height_metrics
    for a, b in zip(fig.texts, plain.texts):
        assert a.get_window_extent(fig.canvas.get_renderer()).bounds == \
            b.get_window_extent(plain.canvas.get_renderer()).bounds, a.get_text()
    assert len(text.heights) >= 9  # it was asked, once per font and size
