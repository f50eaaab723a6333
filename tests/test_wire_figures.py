"""The figures of the wires (notebook 10) draw the numbers they are given, each wire in its palette colour."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import by_gid
from matplotlib.colors import to_rgb

from zerosim.viz import drift_figure, wire_colour, wire_loss_figure, wire_time_figure
from zerosim.viz._palette import WIRES


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_loss_and_drift_lines_are_the_given_numbers_in_the_wires_colours():
    curves = {"float64": [2.0, 1.5, 1.0], "qwZ int8": [2.0, 1.6, 1.2]}
    ax = wire_loss_figure(curves)
    for name, losses in curves.items():
        (line,) = by_gid(ax, f"loss:{name}")
        assert line.get_ydata().tolist() == losses and line.get_xdata().tolist() == [1, 2, 3]
        assert to_rgb(line.get_color()) == to_rgb(WIRES[name])
    drift = {"qgZ int4": [0.08, 0.08, 0.08, 0.08], "qgZ int4 + LoCo": [0.08, 0.05, 0.04, 0.03]}
    ax = drift_figure(drift)
    for name, values in drift.items():
        (line,) = by_gid(ax, f"drift:{name}")
        assert line.get_ydata().tolist() == values and to_rgb(line.get_color()) == to_rgb(WIRES[name])
    (guide,) = by_gid(ax, "guide")
    assert np.allclose(guide.get_ydata(), [0.08 / t for t in (1, 2, 3, 4)])  # 1/t from LoCo's first point


def test_time_bars_stack_the_purposes_and_write_the_total():
    rows = {"unquantized": {"gather params": 14.98, "reduce grads": 7.49},
            "fp8 torchao": {"gather params": 8.01, "reduce grads": 7.49}}
    ax = wire_time_figure(rows)
    for name, by in rows.items():
        (gather,) = by_gid(ax, f"time:{name}:gather params")
        (reduce,) = by_gid(ax, f"time:{name}:reduce grads")
        # matplotlib keeps a bar as x0 and x1 and hands back x1 - x0: one float64 rounding from the width given
        assert gather.get_width() == pytest.approx(by["gather params"], rel=1e-15)
        assert reduce.get_x() == pytest.approx(by["gather params"], rel=1e-15)
        assert reduce.get_width() == pytest.approx(by["reduce grads"], rel=1e-14)
        assert to_rgb(gather.get_facecolor()) == to_rgb(WIRES[name])
    texts = [t.get_text().strip() for t in ax.texts]
    assert texts == ["22.47 s", "15.50 s"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["gather params", "reduce grads"]


@pytest.mark.bad_input("figures", unchanged=True)
def test_an_unknown_wire_has_no_colour():
    with pytest.raises(ValueError, match="no colour for wire 'int2'"):
        wire_colour("int2")


def test_every_wire_has_its_own_colour():
    assert len(set(WIRES.values())) == len(WIRES)
