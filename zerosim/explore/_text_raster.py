"""Text drawn once: the pixels each text made on the explorer's figure, kept and pasted when it is drawn again.

Rendering text is most of a redraw whose axes changed (Agg lays out and rasterises every glyph of every tick label,
axis label and legend entry again); most of those texts come back at the same place from one setting to the next:
the axis labels, the category ticks, the legend's entries, the round tick values. `TextRaster` wraps one Agg
renderer's `draw_text`: a text drawn over the figure's plain background is rendered once, on a blank scratch
canvas of the same size, and its pixels (the box it changed, at its place) are kept under everything that decides
them: the string, the font, angle, colour, antialiasing, the exact position, the dpi. A text's first draw goes to
the renderer as before (a figure drawn once keeps nothing); from its second, it is rendered once more on the scratch
canvas, kept, and pasted whenever it is drawn at the same place over a plain background: the same pixels the
renderer would make, since it would blend the same glyphs over the same white. Anything else (mathtext, a clip, a
text over bars) is drawn by the renderer itself. tests/test_explore_text.py compares the figure with one drawn
without this, pixel for pixel.
"""

from __future__ import annotations

import numpy as np

LIMIT = 4096  # texts kept (each a few kB): a long session's tick values and titles, then the oldest go


class TextRaster:
    """Keeps the pixels of the texts drawn through `renderer` (a matplotlib RendererAgg) over plain background."""

    def __init__(self, renderer):
        from matplotlib.backends.backend_agg import RendererAgg

        self.renderer = renderer
        self.draw = renderer.draw_text  # the renderer's own
        self.kept = {}  # key -> (top, left, pixels (h, w, 4) uint8), or None: it drew nothing
        self.scratch = RendererAgg(int(renderer.width), int(renderer.height), renderer.dpi)
        np.asarray(self.scratch.buffer_rgba())[...] = 255  # the figure's opaque white, which a draw starts from
        self.seen = set()  # keys drawn once, not kept yet
        self.hits = self.misses = 0
        renderer.draw_text = self.draw_text

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if ismath or gc.get_clip_rectangle() is not None or gc.get_clip_path()[0] is not None:
            return self.draw(gc, x, y, s, prop, angle, ismath, mtext)
        features = (mtext.get_fontfeatures(), mtext.get_language()) if mtext is not None else (None, None)
        font = (tuple(prop.get_family()), prop.get_style(), prop.get_variant(), prop.get_weight(), prop.get_stretch(),
                prop.get_size_in_points(), prop.get_file(), prop.get_math_fontfamily())
        key = (s, font, angle, tuple(gc.get_rgb()), gc.get_alpha(), gc.get_forced_alpha(), gc.get_antialiased(),
               float(x), float(y), features, self.renderer.dpi)
        if key not in self.kept:
            self.misses += 1
            if key not in self.seen:  # the first time: drawn as usual (a figure drawn once pays nothing for keeping)
                self.seen.add(key)
                return self.draw(gc, x, y, s, prop, angle, ismath, mtext)
            self.kept[key] = self._render(gc, x, y, s, prop, angle, mtext)  # back again: worth keeping
            if len(self.kept) > LIMIT:
                del self.kept[next(iter(self.kept))]
                self.seen.clear()
        else:
            self.hits += 1
        found = self.kept[key]
        if found is None:
            return None  # it changes no pixel (an empty string)
        top, left, pixels = found
        canvas = np.asarray(self.renderer.buffer_rgba())
        h, w = pixels.shape[:2]
        region = canvas[top:top + h, left:left + w]
        if region.shape == pixels.shape and (region == 255).all():  # plain white: what the scratch had beneath
            region[...] = pixels
            return None
        return self.draw(gc, x, y, s, prop, angle, ismath, mtext)  # over something else: the renderer itself

    def _render(self, gc, x, y, s, prop, angle, mtext):
        """(top, left, pixels) of the box the text changes on a white canvas, or None when it changes nothing."""
        scratch = self.scratch
        buf = np.asarray(scratch.buffer_rgba())
        scratch.draw_text(gc, x, y, s, prop, angle, False, mtext)
        # where to look: a square about (x, y) that holds the text at any angle (width + height, and a margin); the
        # whole canvas if a changed pixel touches its edge
        w, h, _ = scratch.get_text_width_height_descent(s, prop, False)
        reach = int(w + h) + 4
        r0, c0 = max(int(y) - reach, 0), max(int(x) - reach, 0)
        window = buf[r0:int(y) + reach, c0:int(x) + reach]
        changed = np.nonzero((window != 255).any(axis=2))
        rows, cols = window.shape[:2]
        if changed[0].size and (changed[0].min() == 0 < r0 or changed[1].min() == 0 < c0
                                or changed[0].max() == rows - 1 or changed[1].max() == cols - 1):
            r0 = c0 = 0  # it reaches past the square: look everywhere
            changed = np.nonzero((buf != 255).any(axis=2))
        if not changed[0].size:
            return None
        top, bottom = r0 + changed[0].min(), r0 + changed[0].max() + 1
        left, right = c0 + changed[1].min(), c0 + changed[1].max() + 1
        pixels = buf[top:bottom, left:right].copy()
        buf[top:bottom, left:right] = 255  # the scratch is white again for the next text
        return int(top), int(left), pixels
