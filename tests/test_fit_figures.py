"""The will-it-fit figures draw what the runs measured: bars whose tops are the ledgers' peaks plus the estimates,
in the palette's colours, GPUs at their capacities, no time for what does not fit, and legends that cover nothing."""

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_rgb
from matplotlib.patches import Rectangle

from zerosim.analysis.costs import get_gpu, measure_by_stage, runtime_overheads
from zerosim.analysis.planner import plan
from zerosim.models.gpt import strategy_options
from zerosim.models.hf import read_hf_config
from zerosim.models.llama import MetaLlama
from zerosim.viz import fit_figure, kind_colour, plan_figure
from zerosim.viz._fit import ESTIMATE

GB = 1e9
CONFIG = read_hf_config(
    {
        "model_type": "llama",
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 1536,
        "num_hidden_layers": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    }
)
GPUS = [get_gpu("rtx3090"), get_gpu("a100-40gb")]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def runs():
    return {
        s: measure_by_stage(
            MetaLlama.from_config(CONFIG, 4096, **strategy_options(s)), 4, "adam", "bf16-mixed", micro_batch=(8, 4096)
        )
        for s in ("none", "block")
    }


@pytest.fixture(scope="module")
def small_plan():
    return plan(CONFIG, 4, 8, "rtx3090", 4096, 64, stages=(0, 3), strategies=("none", "block", "flash"))


def bars(ax):
    return [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() > 0 and p.get_height() > 0]


def test_fit_bars_stack_the_peak_s_moment_then_the_estimates(runs):
    fig = fit_figure(runs, GPUS, 4)
    fig.canvas.draw()
    for ax, rows in zip(fig.axes, runs.values()):
        for row in rows:
            stack = [p for p in bars(ax) if abs(p.get_x() + p.get_width() / 2 - row["stage"]) < 1e-9]
            measured = [p for p in stack if to_rgb(p.get_facecolor()) != to_rgb(ESTIMATE)]
            top = max(p.get_y() + p.get_height() for p in measured)
            assert top == pytest.approx(row["peak"] / GB, rel=1e-12)  # what was live at the peak: the ledger's peak
            extra = sum(o.bytes for o in runtime_overheads(row["peak"], 4, row["stage"], None, 0.05)) / GB
            assert max(p.get_y() + p.get_height() for p in stack) == pytest.approx(row["peak"] / GB + extra, rel=1e-12)
            for p in measured:
                assert to_rgb(p.get_facecolor()) == to_rgb(kind_colour(p.get_gid().removeprefix("kind:")))
        lines = sorted(line.get_ydata()[0] for line in ax.get_lines())
        assert lines == pytest.approx(sorted(g.capacity / GB for g in GPUS))


def test_the_fit_legend_sits_outside_every_panel(runs):
    fig = fit_figure(runs, GPUS, 4)
    fig.canvas.draw()
    legend = fig.axes[-1].get_legend().get_window_extent()
    for ax in fig.axes:
        assert not legend.overlaps(ax.get_window_extent())


@pytest.mark.slow
def test_plan_figure_rows_are_the_plans(small_plan):
    fig = plan_figure(small_plan, top=6)
    fig.canvas.draw()
    memory, time = fig.axes
    fitting = small_plan.fitting[:6]
    timed = sorted(p.get_width() for p in bars(time))
    assert timed == pytest.approx(sorted(r.step_s for r in fitting), rel=1e-12)  # a bar for each that fits, none else
    ends = sorted({round(p.get_x() + p.get_width(), 9) for p in bars(memory)})
    misses = sorted((r for r in small_plan.rows if not r.fits), key=lambda r: r.total)[: max(2, 6 - len(fitting))]
    for r in [*fitting, *misses]:
        assert round(r.total / GB, 9) in ends  # measured at the peak's moment, then the estimates
    assert memory.get_lines()[0].get_xdata()[0] == pytest.approx(small_plan.settings["capacity"] / GB)
    for p in bars(memory):
        if p.get_gid():
            assert to_rgb(p.get_facecolor()) == to_rgb(kind_colour(p.get_gid().removeprefix("kind:")))
    legend = fig.legends[0].get_window_extent()
    assert not any(legend.overlaps(ax.get_window_extent()) for ax in fig.axes)
