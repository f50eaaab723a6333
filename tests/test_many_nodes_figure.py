"""The many-nodes figure draws the measured rows: each bar is a StrategyRow's number, each memory kind in the
palette's colour, each link tier in its own, and the legends sit below their panels (nothing overlaps a bar)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

from zerosim.analysis.costs import get_preset  # noqa: E402
from zerosim.analysis.planner import strategy_step
from zerosim.models.meta import MetaModel
from zerosim.viz import kind_colour, many_nodes_figure
from zerosim.viz._palette import TIERS

VARIANTS = (("full_shard", None), ("hpz", 4), ("mics", 8), ("hsdp", 8))


@pytest.fixture(scope="module")
def rows():
    model = MetaModel.from_preset(get_preset("gpt2-small"), unit="block")
    return [strategy_step(model, 32, name, 4, group) for name, group in VARIANTS]


@pytest.mark.slow  # four meta steps and a three-panel figure: ~2 s
def test_the_bars_are_the_rows_numbers_in_the_palettes_colours(rows):
    fig = many_nodes_figure(rows, capacity=80e9, gpu="a GPU")
    fig.canvas.draw()
    by_gid = {}
    for artist in fig.findobj(lambda a: a.get_gid() is not None and ":" in str(a.get_gid())):
        by_gid.setdefault(artist.get_gid(), []).append(artist)
    for gid, artists in by_gid.items():
        kind, name = gid.split(":", 1)
        colour = kind_colour(name) if kind == "kind" else TIERS[name]
        assert all(to_rgb(a.get_facecolor()) == to_rgb(colour) for a in artists), gid
    # hpZ's secondary piece: one bar, its height the row's peak of secondary pieces, stacked on its states
    hpz = rows[1]
    (bar,) = [b for b in by_gid["kind:secondary"] if b.get_height() > 0]
    assert bar.get_height() == pytest.approx(hpz.secondary / 1e9) and hpz.secondary > 0
    assert bar.get_y() == pytest.approx(sum(hpz.states.values()) / 1e9)
    # bytes: the middle panel's bars are each row's intra and inter bytes (the first four tier bars of each kind)
    intra = [b.get_height() for b in by_gid["tier:intra-node"]][:len(rows)]
    inter = [b.get_height() for b in by_gid["tier:inter-node"]][:len(rows)]
    assert intra == pytest.approx([r.intra / 1e9 for r in rows])
    assert inter == pytest.approx([r.inter / 1e9 for r in rows])
    # the legends sit below the axes: no legend box meets a panel
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend().get_window_extent(renderer)
        assert all(not legend.overlaps(other.get_window_extent(renderer)) for other in fig.axes)
    plt.close(fig)


@pytest.mark.slow  # six meta steps of GPT-3 175B on 1,024 ranks: ~3 s
def test_the_readme_numbers_of_the_1024_gpu_figure():
    """The paragraph under many_nodes.png (docs/explanation/many-nodes.md), from the figure's own rows
    (figures_cmd.MANY_NODES)."""
    from zerosim.cli.figures_cmd import MANY_NODES
    from zerosim.parallel.data import CommSchedule

    gpt3 = MetaModel.from_preset(get_preset("gpt3-175b"), unit="block")
    comm = CommSchedule.fsdp(forward_prefetch=True)
    rows = {(n, g): strategy_step(gpt3, 1024, n, 8, g, comm=comm, tokens=20480) for n, g in MANY_NODES}
    steps = [r.step for r in rows.values()]
    spread = round(100 * (max(steps) / min(steps) - 1), 1)
    assert (round(min(steps), 1), round(max(steps), 1), spread) == (21.7, 21.8, 0.3)
    full, hpz = rows["full_shard", None], rows["hpz", 8]
    assert round(hpz.secondary / 1e9, 2) == 43.65
    assert (round(hpz.busy["inter-node"], 1), round(full.busy["inter-node"], 1)) == (2.7, 4.1)
    assert 0.6 < hpz.busy["inter-node"] / full.busy["inter-node"] < 0.7  # "by a third"
    assert round(sum(rows["hsdp", 32].states.values()) / 1e9, 1) == 98.2 > 85.5  # over an H100 80GB's 85.5 GB
    for S in (32, 64, 128):  # rings of S > 8 leave the node: every call on InfiniBand, the same bytes as FULL_SHARD's
        r = rows["hsdp", S]  # over the same 8 NICs a node, less latency on shorter rings: 72-77 % of its time
        assert r.busy["intra-node"] == 0 and 0.71 < r.busy["inter-node"] / full.busy["inter-node"] < 0.78
