"""`zerosim figures --style slides`: text a room can read, kept as text in SVG, nothing overlapping, and a figure with
stages as one frame per stage (zerosim/viz/_slides.py)."""

import re

import matplotlib
import pytest

from zerosim.cli.main import main
from zerosim.viz import enlarge_text, slides_style, stage_frames
from zerosim.viz._slides import MIN_POINTS

matplotlib.use("Agg")


def text_boxes(fig):
    """[(text, window extent)] of every visible, non-empty text artist once drawn."""
    from matplotlib.text import Text

    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    shown = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
             and (t.axes is None or t.axes.get_visible())]  # a hidden inset's labels are not drawn
    return [(t.get_text(), t.get_window_extent(r)) for t in shown]


def overlaps(fig) -> list:
    boxes = text_boxes(fig)
    return [(a, b) for i, (a, ea) in enumerate(boxes) for b, eb in boxes[i + 1:]
            if ea.overlaps(eb) and ea.intersection(ea, eb).width > 1 and ea.intersection(ea, eb).height > 1]


def draw(name):
    import argparse

    from zerosim.cli.figures_cmd import FIGURES

    args = argparse.Namespace(params=None, model=None, config=None, layers=None, ranks=64, optimizer="adam",
                              precision="fp16-mixed", unit=None, log=False)
    with slides_style():
        fig = FIGURES[name](args)
        enlarge_text(fig)
    return fig


@pytest.mark.slow  # two figures drawn from live runs (~2 s)
@pytest.mark.parametrize("name", ["memory_by_stage", "peak_by_stage"])
def test_slide_figures_have_large_text_that_does_not_overlap_in_any_frame(name):
    fig = draw(name)
    from matplotlib.text import Text

    assert min(t.get_fontsize() for t in fig.findobj(Text) if t.get_text()) >= MIN_POINTS
    frames = 0
    for k, frame in stage_frames(fig, 4):
        assert overlaps(frame) == [], (name, k)
        frames += 1
    assert frames == 4 and overlaps(fig) == []


def test_frame_k_shows_stages_0_to_k_and_the_figure_comes_back_whole():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.subplots()
    bars = ax.bar(range(4), [4, 3, 2, 1])
    labels = [ax.annotate(str(i), (i, 4 - i)) for i in range(4)]
    inset = ax.inset_axes((0.6, 0.6, 0.3, 0.3))
    for k, _ in stage_frames(fig, 4):
        assert [b.get_visible() for b in bars] == [i <= k for i in range(4)]
        assert [t.get_visible() for t in labels] == [i <= k for i in range(4)]
        assert inset.get_visible() == (k == 3)  # the last stage's zoom comes with the last stage
    assert all(b.get_visible() for b in bars) and inset.get_visible()


@pytest.mark.slow  # one live figure, written four times (~2 s)
def test_zerosim_figures_writes_svg_with_text_kept_and_stage_frames(tmp_path, capsys):
    assert main(["figures", "--only", "peak_by_stage", "--format", "svg", "--style", "slides",
                 "--out", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["peak_by_stage.svg"] + [f"peak_by_stage_stage{k}.svg" for k in range(4)]
    svg = (tmp_path / "peak_by_stage.svg").read_text()
    sizes = [float(s) for s in re.findall(r"font(?:-size)?:\s*(?:[a-z]+\s+)*([\d.]+)px", svg)]
    # text stays text (svg.fonttype none), every size >= 14 pt (matplotlib writes points as px at 72 dpi)
    assert "<text" in svg and sizes and min(sizes) >= MIN_POINTS
    # frame 0 draws one stage's bars; the full figure all four
    assert (tmp_path / "peak_by_stage_stage0.svg").read_text().count("kind:") < svg.count("kind:")
