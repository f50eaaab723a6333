"""Text drawn once: the pixels each text made on the explorer's figure, kept and pasted when it is drawn again.

Rendering text is most of a redraw whose axes changed (Agg lays out and rasterises every glyph of every tick label,
axis label and legend entry again); most of those texts come back at the same place from one setting to the next:
the axis labels, the category ticks, the legend's entries, the round tick values. `TextRaster` wraps one Agg
renderer's `draw_text` and keeps a text's pixels (the box it changed, at its place) under everything that decides
them: the string, the font, angle, colour, antialiasing, the exact position, the dpi. A text's first draw goes to
the renderer as before (a figure drawn once keeps nothing). At its second, if the box its metrics give (and a
margin) is plain white, the renderer draws it there and the box's changed pixels are kept; from then on, drawn at
the same place over plain white, they are pasted: the same pixels the renderer would make, since it would blend the
same glyphs over the same white. Anything else (mathtext, a clip, a text over bars, glyphs reaching past the box) is
drawn by the renderer itself. tests/test_explore_text.py compares the figure with one drawn without this, pixel for
pixel.
"""

from __future__ import annotations

import math

import numpy as np

LIMIT = 4096  # texts kept (each a few kB): a long session's tick values and titles, then the oldest go
MARGIN = 2  # pixels about a text's metric box where its glyphs may still reach (antialiasing, hinting)


class TextRaster:
    """Keeps the pixels of the texts drawn through `renderer` (a matplotlib RendererAgg) over plain background."""

    def __init__(self, renderer):
        self.renderer = renderer
        self.draw = renderer.draw_text  # the renderer's own
        self.kept = {}  # key -> (top, left, pixels (h, w, 4) uint8), or None: it drew nothing
        self.seen = set()  # keys drawn once, not kept yet
        self.hits = self.misses = 0
        renderer.draw_text = self.draw_text
        self.heights = {}  # font key -> (ascent, descent, line gap) in pixels, read once (`font_height_metrics`)
        if not hasattr(renderer, "_get_font_height_metrics"):
            renderer._get_font_height_metrics = self.font_height_metrics

    def font_height_metrics(self, prop):
        """A font's (ascent, descent, line gap) in pixels, read from its tables once, not at every layout.

        matplotlib 3.11 lays a text out (text.py `Text._get_layout`) by first finding its font and reading two of its
        tables (`get_sfnt_table`: OS/2, else hhea, and head), for every tick label, legend entry and title at every
        draw: a tenth of a full draw of this figure here. `_get_layout` asks the renderer first, if it has
        `_get_font_height_metrics` (the PDF and PostScript renderers' hook, _backend_pdf_ps.py, which matplotlib marks
        temporary; (None, None, None) means "measure as usual"); this gives it the numbers `_get_layout` itself would
        compute, in its order of operations, kept per font and size. A release without the hook never calls it; one
        whose computation differs would move pixels, which tests/test_explore_text.py compares with a renderer
        without this."""
        key = self._font_key(prop)
        if key not in self.heights:
            self.heights[key] = _height_metrics(prop, self.renderer.dpi)
        return self.heights[key]

    @staticmethod
    def _font_key(prop) -> tuple:
        return (tuple(prop.get_family()), prop.get_style(), prop.get_variant(), prop.get_weight(), prop.get_stretch(),
                prop.get_size_in_points(), prop.get_file(), prop.get_math_fontfamily())

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if ismath or gc.get_clip_rectangle() is not None or gc.get_clip_path()[0] is not None:
            return self.draw(gc, x, y, s, prop, angle, ismath, mtext)
        features = (mtext.get_fontfeatures(), mtext.get_language()) if mtext is not None else (None, None)
        font = self._font_key(prop)
        key = (s, font, angle, tuple(gc.get_rgb()), gc.get_alpha(), gc.get_forced_alpha(), gc.get_antialiased(),
               float(x), float(y), features, self.renderer.dpi)
        if key not in self.kept:
            self.misses += 1
            if key not in self.seen:  # the first time: drawn as usual (a figure drawn once pays nothing for keeping)
                self.seen.add(key)
                return self.draw(gc, x, y, s, prop, angle, ismath, mtext)
            return self._draw_and_keep(key, gc, x, y, s, prop, angle, mtext)  # back again: worth keeping
        self.hits += 1
        found = self.kept[key]
        if found is None:
            return None  # it changes no pixel (an empty string)
        top, left, pixels = found
        canvas = np.asarray(self.renderer.buffer_rgba())
        h, w = pixels.shape[:2]
        region = canvas[top:top + h, left:left + w]
        if region.shape == pixels.shape and (region == 255).all():  # plain white: what it was drawn over
            region[...] = pixels
            return None
        return self.draw(gc, x, y, s, prop, angle, ismath, mtext)  # over something else: the renderer itself

    def _draw_and_keep(self, key, gc, x, y, s, prop, angle, mtext) -> None:
        """Draw the text; keep (top, left, pixels) of the box it changed, or None when it changed nothing, if all it
        could reach was plain white before and its glyphs stayed inside that window."""
        canvas = np.asarray(self.renderer.buffer_rgba())
        r0, r1, c0, c1 = self._window(x, y, s, prop, angle)
        plain = bool((canvas[r0:r1, c0:c1] == 255).all())
        self.draw(gc, x, y, s, prop, angle, False, mtext)
        if not plain:
            return None  # drawn over something: nothing to keep this time
        window = canvas[r0:r1, c0:c1]
        changed = np.nonzero((window != 255).any(axis=2))
        if not changed[0].size:
            self._keep(key, None)
            return None
        rows, cols = window.shape[:2]
        height, width = canvas.shape[:2]
        if ((changed[0].min() == 0 < r0) or (changed[1].min() == 0 < c0) or (changed[0].max() == rows - 1
                                                                            and r1 < height)
                or (changed[1].max() == cols - 1 and c1 < width)):
            return None  # its glyphs reach the window's edge, and may go past it: not kept
        top, left = r0 + int(changed[0].min()), c0 + int(changed[1].min())
        bottom, right = r0 + int(changed[0].max()) + 1, c0 + int(changed[1].max()) + 1
        self._keep(key, (top, left, canvas[top:bottom, left:right].copy()))
        return None

    def _keep(self, key, found) -> None:
        self.kept[key] = found
        if len(self.kept) > LIMIT:
            del self.kept[next(iter(self.kept))]
            self.seen.clear()

    def _window(self, x, y, s, prop, angle) -> tuple:
        """(top, bottom, left, right) rows and columns of the canvas the text can reach: the box its metrics give
        (width w along its baseline at (x, y), h - d above it and d below), turned by its angle, and a margin for
        glyphs that overhang it; clipped to the canvas."""
        w, h, d = _metrics(self.renderer, s, prop)
        cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
        corners = [(x + u * cos - v * sin, y - (u * sin + v * cos)) for u in (0, w) for v in (-d, h - d)]
        height, width = np.asarray(self.renderer.buffer_rgba()).shape[:2]
        r0 = min(max(int(math.floor(min(r for _, r in corners))) - MARGIN, 0), height)
        c0 = min(max(int(math.floor(min(c for c, _ in corners))) - MARGIN, 0), width)
        r1 = min(max(int(math.ceil(max(r for _, r in corners))) + MARGIN + 1, r0), height)
        c1 = min(max(int(math.ceil(max(c for c, _ in corners))) + MARGIN + 1, c0), width)
        return r0, r1, c0, c1


def _metrics(renderer, s: str, prop) -> tuple:
    """(width, height, descent) of one line `s` in pixels: matplotlib's cached measure (text.py, which the text's
    layout has just filled for this line), else the renderer's own."""
    try:
        from matplotlib.text import _get_text_metrics_with_cache

        return _get_text_metrics_with_cache(renderer, s, prop, False, renderer.dpi)
    except (ImportError, TypeError):
        return renderer.get_text_width_height_descent(s, prop, False)


def _height_metrics(prop, dpi: float) -> tuple:
    """(ascent, descent, line gap) of `prop`'s font at `dpi`, as matplotlib 3.11's text.py `Text._get_layout` reads
    them (OS/2's typographic metrics, else hhea's, scaled by size / units per em); (None, None, None) if it has
    neither table, so matplotlib measures as it would without the hook."""
    from matplotlib.font_manager import fontManager, get_font

    font = get_font(fontManager._find_fonts_by_props(prop))
    for table_name, gap_key, ascent_key, descent_key in (("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"),
                                                         ("hhea", "lineGap", "ascent", "descent")):
        table = font.get_sfnt_table(table_name)
        if table is None:
            continue
        scale = 1 / font.get_sfnt_table("head")["unitsPerEm"] * prop.get_size_in_points() * dpi / 72
        return table[ascent_key] * scale, -table[descent_key] * scale, table[gap_key] * scale
    return None, None, None
