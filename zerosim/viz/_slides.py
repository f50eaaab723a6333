"""Slide-ready figures: large text kept as text, and a figure with stages shown one stage more per frame.

    with slides_style():                # before drawing: larger default fonts, text stays text in SVG / PDF
        fig = draw()
    enlarge_text(fig)                   # after drawing: every label at least MIN_POINTS, however it was set
    for k, frame in stage_frames(fig, 4):   # frame k shows stages 0..k of the first axes
        frame.savefig(f"fig_stage{k}.svg")

`zerosim figures --style slides --format svg` does all three. A lecturer's slide is read from the back of a room:
STYLE sets 16-point text and 1.5x thicker lines; fonts kept as text (svg.fonttype "none") stay editable in
Keynote, PowerPoint or Inkscape.
"""

from __future__ import annotations

import contextlib

MIN_POINTS = 14  # no text on a slide below this size
STYLE = {"font.size": 16, "axes.titlesize": 18, "axes.labelsize": 16, "xtick.labelsize": 14, "ytick.labelsize": 14,
         "legend.fontsize": 14, "lines.linewidth": 2.25, "svg.fonttype": "none", "pdf.fonttype": 42}


@contextlib.contextmanager
def slides_style():
    """matplotlib's defaults for slides, while figures are drawn and saved inside the block."""
    import matplotlib

    with matplotlib.rc_context(STYLE):
        yield


GROW = (1.7, 1.3)  # the figure grows with its text (wider: a slide is 16:9), so that labels keep their room


def enlarge_text(fig, minimum: float = MIN_POINTS) -> None:
    """Every text artist of `fig` at `minimum` points or more (a figure that set 8-point labels by hand too), and
    the figure GROW times larger (width, height), so that larger text keeps its room."""
    from matplotlib.text import Text

    for t in fig.findobj(Text):
        if t.get_text() and t.get_fontsize() < minimum:
            t.set_fontsize(minimum)
    w, h = fig.get_size_inches()
    fig.set_size_inches(w * GROW[0], h * GROW[1])


def stage_frames(fig, stages: int):
    """Yield (k, fig) for k = 0..stages-1 with only stages 0..k of the first axes shown: its bars and their labels at
    x > k + 0.5 (stage i is drawn at x = i) and any other axes (an inset of the last stage) hidden until the last
    frame. The figure is restored afterwards."""
    from matplotlib.patches import Rectangle
    from matplotlib.text import Annotation

    ax = fig.axes[0]
    placed = [(p, p.get_x() + p.get_width() / 2) for p in ax.patches if isinstance(p, Rectangle)]
    placed += [(a, a.xy[0]) for a in ax.texts if isinstance(a, Annotation)]
    others = [a for a in fig.axes[1:] + list(ax.child_axes) if a is not ax]  # an inset is a child of the axes
    shown = {id(a): a.get_visible() for a, _ in placed} | {id(a): a.get_visible() for a in others}
    try:
        for k in range(stages):
            for artist, x in placed:
                artist.set_visible(shown[id(artist)] and x <= k + 0.5)
            for other in others:
                other.set_visible(shown[id(other)] and k == stages - 1)
            yield k, fig
    finally:
        for artist, _ in placed:
            artist.set_visible(shown[id(artist)])
        for other in others:
            other.set_visible(shown[id(other)])
