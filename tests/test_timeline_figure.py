"""The Gantt figure: one row per (rank, stream), a legend naming exactly what is drawn, exposed time marked."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from zerosim import MLP, Adam, Cluster, ZeroEngine  # noqa: E402
from zerosim.analysis.timeline import Hardware, simulate  # noqa: E402
from zerosim.viz import timeline_figure
from zerosim.viz._timeline import EXPOSED


def run(stage, checkpoint=False, ranks=2):
    cluster = Cluster(ranks, trace="call")
    engine = ZeroEngine(MLP([8, 16, 4]), cluster, stage, Adam(), checkpoint=checkpoint)
    rng = np.random.default_rng(1)
    engine.step(
        [
            (rng.standard_normal((2, 8)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32))
            for _ in range(ranks)
        ]
    )
    return simulate(cluster.trace, Hardware("a100", "pcie5"))


@pytest.mark.parametrize("stage, checkpoint", [(1, False), (3, True)])
def test_rows_and_legend_name_what_is_drawn(stage, checkpoint):
    result = run(stage, checkpoint)
    ax = timeline_figure(result)
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "rank 0 compute",
        "rank 0 comm",
        "rank 1 compute",
        "rank 1 comm",
    ]
    drawn = {iv.category for iv in result.intervals()}
    legend = {t.get_text() for t in ax.get_legend().get_texts()}
    exposed = {EXPOSED + " (under compute)"} if result.exposed_comm.max() > 0 else set()
    assert legend == drawn | exposed  # every colour drawn is named, and nothing else
    assert ("recompute" in drawn) == checkpoint and ("gather params" in drawn) == (stage == 3)


def test_many_ranks_show_the_first_four():
    ax = timeline_figure(run(2, ranks=10))
    assert len(ax.get_yticklabels()) == 8 and "ranks 0..3 of 10" in ax.get_title()
