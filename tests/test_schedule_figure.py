"""The pipeline schedule figure (zerosim/viz/_schedule.py) draws a real run of each schedule's table: every rank's
actions in the table's order, one box each, and a bubble equal to the closed form (parallel/pipeline/_costs.py) as an
exact fraction; `zerosim figures --only pipeline_schedules` writes it."""

from fractions import Fraction

import matplotlib
import pytest

matplotlib.use("Agg")

from helpers import by_gid  # noqa: E402

from zerosim.parallel.pipeline import make_table  # noqa: E402
from zerosim.viz import measure_schedule, schedule_figure  # noqa: E402

LETTER = {"forward": "F", "backward": "B", "backward-input": "I", "backward-weight": "W"}


@pytest.mark.slow
@pytest.mark.parametrize("schedule, V, closed", [
    ("gpipe", 1, Fraction(3, 11)),  # (P - 1)/(M + P - 1), P = 4, M = 8
    ("1f1b", 1, Fraction(3, 11)),  # the same bubble, less memory
    ("interleaved-1f1b", 2, Fraction(3, 19)),  # (P - 1)/(V·M + P - 1)
    ("zero-bubble", 2, Fraction(1, 17)),  # idle (P - 1)(T_F + T_B - 2 T_W)/V = 3·1/2 of 8·3 + 3/2 per rank
])
def test_each_panel_is_its_tables_run_with_the_closed_forms_bubble(schedule, V, closed):
    run = measure_schedule(schedule, 4, 8, V)
    assert run["closed_form"] == closed and run["bubbles"] == [closed] * 4
    table = make_table(schedule, 4, 8, V)
    for r, row in enumerate(run["rows"]):
        drawn = [(kind, micro, stage) for _, _, kind, micro, stage in sorted(row)]
        assert drawn == [(a.kind, a.micro, a.stage) for a in table.of_rank(r)], r  # the table's order, in time


@pytest.mark.slow
def test_the_figure_has_a_box_per_action_and_a_bubble_per_rank():
    fig = schedule_figure(pp=2, micro_batches=4)
    axes = fig.axes
    assert len(axes) == 4
    gpipe, _, _, zero_bubble = axes
    assert len(by_gid(gpipe, "action:gpipe:0:F0")) == 1 and len(by_gid(gpipe, "bubble:gpipe:1")) == 1
    assert len([p for p in gpipe.patches if (p.get_gid() or "").startswith("action:gpipe:0:")]) == 2 * 4
    # zero bubble with V = 2: each micro-batch's forward, backward-input and backward-weight on each of 2 chunks
    assert len([p for p in zero_bubble.patches if (p.get_gid() or "").startswith("action:zero-bubble:1:")]) == 3 * 8
    assert "closed form 1/5" in gpipe.get_title(loc="left")  # (2 - 1)/(4 + 2 - 1)
