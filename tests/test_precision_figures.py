"""The precision lab's figures draw what the runs recorded (issue 11, Must show 6).

Each figure is checked against numbers computed apart from it: the histogram's bars against a direct
count of binary exponents, the loss-scale panel's crosses against the skipped steps of the trace's
`LossScaleUpdate` events, the clipping lines against the `GradClip` events, the recipe lines against
`recipe_errors`; and the overlap of legend and plot is ruled out by placing legends outside the axes.
"""

import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import by_gid

from zerosim import MLP, Cluster, ZeroEngine, get_optimizer
from zerosim.analysis.numerics import log2_histogram, recipe_errors
from zerosim.cluster import GradClip, LossScaleUpdate
from zerosim.models import make_regression
from zerosim.precision import MixedPrecision, get_precision
from zerosim.viz import clip_figure, loss_scale_figure, recipe_figure, underflow_figure


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_underflow_histogram_counts_binary_exponents():
    # exponents -30, -29, -20, -3, 0, 0
    values = np.array([0.0, 2.0**-30, 3 * 2.0**-30, -(2.0**-20), 2.0**-3, 1.0, 1.5])
    ax = underflow_figure(values, scale=2.0**10, lo=-32, hi=12)
    heights = {round(b.get_x()): b.get_height() for b in by_gid(ax, "unscaled")}
    share = 100 / 6  # six nonzero values
    assert {x: h for x, h in heights.items() if h} == {-30: share, -29: share, -20: share, -3: share, 0: 2 * share}
    (scaled,) = by_gid(ax, "scaled")
    x, y = scaled.get_data()
    assert dict((int(a), b) for a, b in zip(x, y) if b) == {-20: share, -19: share, -10: share, 7: share, 10: 2 * share}
    assert {"zero", "subnormal", "overflow"} <= {a.get_gid() for a in ax.get_children()}
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0].startswith("gradients of the run (fp32): 33% at or below 2^-25")  # 2**-30 and 3 * 2**-30
    assert labels[1] == "the same, times S = 2^10: 0.00% become 0"
    edges, counts, zeros = log2_histogram(values, -32, 12)
    assert counts.sum() == 6 and zeros == 1


def test_loss_scale_panels_mark_exactly_the_skipped_steps():
    widths, n = [8, 16, 4], 2
    data = make_regression(np.random.default_rng(0), n * 8, 4, widths)
    x, t = data[2 * n + 1]
    data[2 * n + 1] = (x, np.full_like(t, 6e4))  # step 3: rank 1 overflows
    runs = {}
    for scaler in ("torch", "deepspeed"):
        engine = ZeroEngine(
            MLP(widths), Cluster(n), 1, get_optimizer("adam"), get_precision("fp16-mixed").with_(loss_scale=scaler)
        )
        for s in range(8):
            engine.step(data[s * n : (s + 1) * n])
        runs[scaler] = engine.cluster.trace.of_type(LossScaleUpdate)
    axes = loss_scale_figure(runs)
    for ax, (label, events) in zip(axes, runs.items()):
        skipped = [e for e in events if e.skipped]
        assert 3 in [e.step for e in skipped]
        (marks,) = by_gid(ax, f"skipped:{label}")
        assert list(marks.get_xdata()) == [e.step for e in skipped]
        assert list(marks.get_ydata()) == [e.scale_before for e in skipped]
        (line,) = by_gid(ax, f"scale:{label}")
        assert list(line.get_ydata()) == [e.scale_before for e in events]
        assert ax.get_legend().get_bbox_to_anchor().x0 >= ax.get_window_extent().x1  # legend outside the plot


def test_clip_figure_draws_the_agreed_norms():
    widths, n = [8, 16, 4], 3
    engine = ZeroEngine(MLP(widths), Cluster(n), 2, get_optimizer("adam"), "fp32", clip_grad=0.3)
    data = make_regression(np.random.default_rng(1), n * 5, 4, widths)
    for s in range(5):
        engine.step(data[s * n : (s + 1) * n])
    clips = engine.cluster.trace.of_type(GradClip)
    ax = clip_figure(clips)
    (norm,) = by_gid(ax, "norm")
    (after,) = by_gid(ax, "clipped")
    assert list(norm.get_ydata()) == [c.norm for c in clips]
    # norm x coef: max_norm when clipped
    assert np.allclose(after.get_ydata(), [min(c.norm, 0.3) for c in clips], rtol=1e-5)
    (limit,) = by_gid(ax, "max_norm")
    assert list(limit.get_ydata()) == [0.3, 0.3]


def test_recipe_figure_draws_each_recipes_errors_and_a_sqrt_n_guide():
    policies = {"seeds fp16": MixedPrecision("fp16"), "ddp fp16": MixedPrecision("fp16", reduction="ddp")}
    errors = recipe_errors(policies, [3, 12], length=256)
    ax = recipe_figure(errors)
    for label in policies:
        (line,) = by_gid(ax, f"recipe:{label}")
        assert list(line.get_xdata()) == [3, 12]
        assert list(line.get_ydata()) == [e.rms for e in errors if e.label == label]
    (guide,) = by_gid(ax, "sqrt-n")
    first = errors[0].rms
    assert np.allclose(guide.get_ydata(), [first, 2 * first])  # sqrt(12 / 3) = 2
