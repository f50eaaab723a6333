"""The memory panel's legend, laid out once per change of what it lists: a colour box (or the capacity line's dash)
and a label per entry, in two columns below the panel.

matplotlib's `Axes.legend` packs its entries in nested offset boxes (matplotlib 3.11, offsetbox.py: a VPacker of
HPackers of a DrawingArea and a TextArea each) and lays every entry out again at every draw, twice (once to place
the box, once to draw it): `Legend.draw` took 10-15 ms of a 40-60 ms full draw of this figure here, for a legend
that changes only when the kinds held change. `Key.show` places the same handles and labels once, with matplotlib's
default spacing (rcParams legend.*: handle 2 x 0.7 em, 0.8 em to its label, rows 0.5 em apart, columns 2 em apart,
the first column the longer, 0.5 + 0.4 em in from the anchor), as plain artists the figure draws with everything
else: each row as tall as its label's glyphs as the renderer hints them (and at least the font's line and "lp", as
offsetbox.py `TextArea.get_bbox` has it), each column as wide as its widest label so measured. Every entry lands
where matplotlib puts it across, each row where matplotlib puts it in its column, and a column as a whole within a
pixel of matplotlib's (which aligns the two columns by their rows' descents; on the explorer's figures, to the
pixel): tests/test_explore_key.py draws matplotlib's own legend of the same entries beside it. Positions are in
points from the anchor, so a figure saved at another dpi keeps its layout (measured once, at the dpi of the
figure's canvas).
"""

from __future__ import annotations

import math

EM = {"handle": 2.0, "height": 0.7, "pad": 0.8, "rows": 0.5, "columns": 2.0, "inset": 0.5 + 0.4}


class Key:
    """Legend entries for `axes`, their upper left at its axes fraction `anchor`, in `fontsize` points; `artists`
    holds each entry's handle and label, in the order `show` was given them."""

    def __init__(self, axes, anchor: tuple, fontsize: float):
        from matplotlib.transforms import Affine2D, ScaledTranslation

        self.axes, self.fontsize = axes, fontsize
        # points from the anchor -> display pixels, at whatever dpi the figure is drawn
        self.transform = (Affine2D().scale(1 / 72) + axes.figure.dpi_scale_trans
                          + ScaledTranslation(*anchor, axes.transAxes))
        self.artists = []  # what the figure draws: each entry's handle, then its label

    def show(self, entries: list) -> None:
        """Lay out `entries`: (label, handle) pairs, a handle being ("box", facecolor, edgecolor, linewidth) or
        ("line", colour, linestyle, linewidth)."""
        from matplotlib.lines import Line2D
        from matplotlib.patches import Rectangle
        from matplotlib.text import Text

        from zerosim.explore._text_raster import _height_metrics, _metrics

        for artist in self.artists:
            artist.remove()
        self.artists = []
        em, rows = self.fontsize, math.ceil(len(entries) / 2)
        prop = Text(fontsize=self.fontsize).get_fontproperties()
        renderer = self.axes.figure.canvas.get_renderer()
        pt = 72 / renderer.dpi  # the labels measured as the renderer draws them (hinted), in points
        ascent, descent, _ = _height_metrics(prop, renderer.dpi)  # a line's least extent, as text.py spaces lines
        _, lp, lp_descent = _metrics(renderer, "lp", prop)  # and as offsetbox.py `TextArea.get_bbox` spaces them
        ascent, descent = max(ascent, lp - lp_descent), max(descent, lp_descent)
        left = EM["inset"] * em
        for column in (entries[:rows], entries[rows:]):
            widest, top = 0.0, -EM["inset"] * em
            for label, handle in column:
                w, h, d = _metrics(renderer, label, prop)  # a row is as tall as its label's glyphs and the font
                above, below = max(h - d, ascent) * pt, max(d, descent) * pt
                baseline = top - above
                box = left, baseline, EM["handle"] * em, EM["height"] * em  # on the label's baseline
                if handle[0] == "box":
                    self._add(Rectangle(box[:2], *box[2:], facecolor=handle[1], edgecolor=handle[2],
                                        linewidth=handle[3], transform=self.transform))
                else:
                    y = baseline + box[3] / 2
                    self._add(Line2D([left, left + box[2]], [y, y], color=handle[1], linestyle=handle[2],
                                     linewidth=handle[3], transform=self.transform))
                self._add(Text(left + box[2] + EM["pad"] * em, baseline, label, fontsize=self.fontsize,
                               va="baseline", ha="left", transform=self.transform))
                widest = max(widest, w * pt)
                top = baseline - below - EM["rows"] * em
            left += EM["handle"] * em + EM["pad"] * em + widest + EM["columns"] * em

    def _add(self, artist) -> None:
        artist.set_clip_on(False)
        self.axes.figure.add_artist(artist)  # the figure's, not the axes': the panel's patches stay its bars
        self.artists.append(artist)

