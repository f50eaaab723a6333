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
