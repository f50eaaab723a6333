"""The memory explorer (zerosim/explore): what a slider draws is what `zerosim memory` / `zerosim timeline` print.

The explorer runs its own meta step (numbers.py); the commands run theirs through their own flag parsing
(cli/model_args.py). Each test moves a control the way a learner does (its `value`) and reads the drawn
figure's artists back: bar heights in GB, bar widths in ms. Exact equality: the same bytes, converted once.
"""

import json

import pytest

from zerosim.cli.main import main
from zerosim.explore import MemoryExplorer, Settings, explore, explorer_figure

pytest.importorskip("ipywidgets")

SMALL = dict(model="gpt2-small", ranks=4, stage=3, precision="bf16-mixed", optimizer="adam", seq_len=512,
             micro_batch=2, checkpoint="block", gpu="rtx3090")


def cli_json(capsys, *argv) -> dict:
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def flags(s: Settings) -> list:
    """The explorer's settings as flags, with the kernels it draws (zerosim's fused ones)."""
    return ["--model", s.model, "--ranks", str(s.ranks), "--precision", s.precision, "--optimizer", s.optimizer,
            "--seq-len", str(s.seq_len), "--batch", str(s.micro_batch), "--checkpoint", s.checkpoint, "--kernels",
            "fused"]


def drawn(fig) -> tuple:
    """({kind: GB} of the at-peak column, {part: ms} of the time bars) read back from the figure's artists."""
    mem, tim = fig.axes[:2]
    kinds = {p.get_gid()[5:]: p.get_height() for p in mem.patches if (p.get_gid() or "").startswith("kind:")
             and abs(p.get_x() + p.get_width() / 2) < 1e-9}  # column 0: at the peak
    times = {p.get_gid()[5:]: p.get_width() for p in tim.patches if (p.get_gid() or "").startswith("time:")}
    return kinds, times


@pytest.mark.parametrize("stage", [1, 3])
def test_moving_the_stage_slider_draws_what_zerosim_memory_and_timeline_print(capsys, stage):
    ex = MemoryExplorer(**SMALL | {"stage": 0})
    ex.controls["stage"].value = stage  # what a click on the toggle does
    s = ex.settings
    assert s.stage == stage
    mem = cli_json(capsys, "memory", *flags(s))
    row = next(r for r in mem["stages"] if r["stage"] == stage)
    tl = cli_json(capsys, "timeline", *flags(s), "--stage", str(stage), "--gpu", s.gpu, "--gpus-per-node", "8",
                  "--efficiency", "peak")  # the explorer times at the datasheet peaks
    kinds, times = drawn(ex.figure)
    # matplotlib keeps a stacked segment as (bottom, top) and gives back top - bottom: one subtraction of doubles
    # below the column's total, so each height is exact to within an ulp of that total (2.2e-16 relative; 1e-12 here)
    assert kinds == pytest.approx({k: v / 1e9 for k, v in row["at_peak"].items()}, abs=1e-12 * row["peak"] / 1e9)
    assert ex.numbers["peak"] == row["peak"] == tl["peak"]
    assert times == {"compute": tl["compute_s"] * 1e3, "hidden": tl["overlapped_s"] * 1e3,
                     "exposed": tl["exposed_comm_s"] * 1e3}
    assert ex.numbers["step_s"] == tl["step_s"]


def test_every_control_changes_the_setting_it_names():
    ex = MemoryExplorer(**SMALL)
    moves = {"ranks": 8, "precision": "fp16-mixed", "optimizer": "sgd", "seq_len": 1024, "micro_batch": 1,
             "checkpoint": "none", "gpu": "h100-80gb", "model": "gpt2-medium", "offload": "optimizer-cpu"}
    for name, value in moves.items():
        before = ex.numbers
        ex.controls[name].value = value
        assert getattr(ex.settings, name) == value
        assert ex.numbers == explore(ex.settings) and ex.numbers != before, name


def test_the_capacity_line_is_the_gpus_and_a_stage_that_does_not_fit_says_so():
    from zerosim.analysis.costs import GPUS

    n = explore(Settings(**SMALL | {"stage": 0, "gpu": "rtx3090", "model": "gpt2-xl", "seq_len": 1024}))
    fig = explorer_figure(n)
    line = next(a for a in fig.axes[0].lines if a.get_gid() == "capacity")
    assert line.get_ydata()[0] == GPUS["rtx3090"].capacity / 1e9
    assert n["peak"] > GPUS["rtx3090"].capacity and "does NOT fit" in fig.axes[0].get_title()


@pytest.mark.bad_input("explorers")
def test_a_setting_out_of_range_is_refused_by_name_and_the_last_figure_stays():
    with pytest.raises(ValueError, match="stage must be 0, 1, 2 or 3"):
        Settings().with_(stage=4)
    with pytest.raises(ValueError, match="ranks must be a whole number"):
        Settings().with_(ranks=0)
    ex = MemoryExplorer(**SMALL)
    fig, numbers = ex.figure, ex.numbers
    ex.controls["seq_len"].value = 2048  # gpt2-small has 1024 positions
    assert "longer than" in ex.message.value and ex.numbers is numbers and ex.figure is fig


def test_an_explorer_draws_live_widgets_only_in_a_kernel_with_a_front_end(monkeypatch):
    """No kernel: no widgets. A kernel: widgets, unless ZEROSIM_STATIC_WIDGETS asks for plain outputs (the
    notebook tests, because headless widget output can block: jupyter/nbclient#312)."""
    import IPython

    from zerosim.explore import _front_end as front_end

    monkeypatch.delenv(front_end.STATIC, raising=False)
    assert not front_end.live()
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    assert front_end.live()
    monkeypatch.setenv(front_end.STATIC, "1")
    assert not front_end.live()


def test_headless_an_explorer_shows_its_text_and_figure_and_live_its_widget(monkeypatch):
    import IPython
    import IPython.display

    from zerosim.explore import _front_end as front_end

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs: shown.append(objs))
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setenv(front_end.STATIC, "1")
    front_end.show("WIDGET", "<pre>hops</pre>", "FIGURE")
    ((html, figure),) = shown
    assert html.data == "<pre>hops</pre>" and figure == "FIGURE"
    monkeypatch.delenv(front_end.STATIC)
    front_end.show("WIDGET", "<pre>hops</pre>", "FIGURE")
    assert shown[1] == ("WIDGET",)


@pytest.mark.slow  # seven settings, each drawn twice (~5 s on a busy machine)
def test_the_offload_control_draws_the_host_column_and_what_the_device_waited_for():
    """Moving the offload drop-down draws a third column, rank 0's host ledger at rest stacked by kind (gid
    "host:<kind>"), and a fourth time bar, the device's wait for the host; moving it back takes both away."""
    ex = MemoryExplorer(**SMALL | {"stage": 2})
    ex.controls["offload"].value = "optimizer-cpu"
    mem, tim = ex.figure.axes[:2]
    host = {p.get_gid()[5:]: p.get_height() for p in mem.patches if (p.get_gid() or "").startswith("host:")}
    want = ex.numbers["host"]["host"]["resting"]
    assert host == pytest.approx({k: v / 1e9 for k, v in want.items()}, abs=1e-12 * sum(want.values()) / 1e9)
    assert {"master", "optim:m", "optim:v"} <= set(host) and "master" not in drawn(ex.figure)[0]  # off the device
    assert [t.get_text() for t in mem.get_xticklabels()][-1] == "host, at rest"
    times = drawn(ex.figure)[1]
    assert times["host"] == ex.numbers["host_wait_s"] * 1e3 > 0
    ex.controls["offload"].value = "none"
    assert not any((p.get_gid() or "").startswith("host:") for p in mem.patches)
    assert set(drawn(ex.figure)[1]) == {"compute", "hidden", "exposed"} and len(mem.get_xticks()) == 2


def test_a_redraw_moves_the_same_artists_and_renders_the_pixels_a_new_figure_would():
    """A slider move updates the one figure in place (the same axes, bars and labels, nothing rebuilt) and its PNG,
    drawn over a saved background where the axes did not change, with the texts it drew before pasted from their kept
    pixels (explore/_text_raster.py), equals a figure built anew for that setting with matplotlib rasterising every
    text, pixel for pixel: the rebuild is the naive twin of the redraw."""
    import io

    import numpy as np
    from matplotlib.image import imread

    from zerosim.explore import ExplorerCanvas

    ex = MemoryExplorer(**SMALL | {"stage": 0})
    canvas = ex.canvas
    axes, time_bars = list(ex.figure.axes[:2]), list(canvas.time_bars)
    canvas.png()
    restored, restore = [0], canvas.figure.canvas.restore_region

    def counted(*args, **kwargs):  # a background kept from an earlier drawing, pasted under the moving artists
        restored[0] += 1
        return restore(*args, **kwargs)

    canvas.figure.canvas.restore_region = counted
    moves = ({"stage": 1}, {"stage": 3}, {"ranks": 8}, {"checkpoint": "none"}, {"stage": 1}, {"gpu": "h100-80gb"},
             {"offload": "optimizer-cpu"}, {"offload": "none"})
    for move in moves:
        name, value = next(iter(move.items()))
        ex.controls[name].value = value
        assert ex.figure is canvas.figure and ex.figure.axes[:2] == axes and canvas.time_bars == time_bars
        fresh = ExplorerCanvas(text_raster=False)  # every text rasterised by matplotlib itself
        fresh.update(ex.numbers)
        got, want = (imread(io.BytesIO(c.png())) for c in (canvas, fresh))
        assert np.array_equal(got, want), move
    assert 0 < restored[0] < len(moves) and len(canvas._backgrounds) > 1  # some moves kept the axes, some did not
    text = canvas.figure.canvas.get_renderer().zerosim_text
    assert text.hits > 0 and text.misses > 0  # some texts were pasted, some rasterised anew


def test_the_host_column_is_what_zerosim_memory_prints_with_offload(capsys):
    """The explorer's host column (an offload placement on the settings) holds rank 0's host and NVMe ledgers, at rest
    and at the peak, and the node's verdict: `zerosim memory --offload-optimizer cpu --json`'s, on the machine whose
    GPUs these are; its step is `zerosim timeline --offload-optimizer cpu`'s. Without offload the column is empty."""
    s = Settings(**SMALL | {"stage": 2, "offload": "optimizer-cpu"})
    n = explore(s)
    mem = cli_json(capsys, "memory", *flags(s), "--offload-optimizer", "cpu", "--gpu", s.gpu, "--gpus-per-node", "8")
    row = next(r for r in mem["stages"] if r["stage"] == 2)
    for tier in ("host", "nvme"):
        assert (n["host"][tier]["resting"], n["host"][tier]["peak"]) == (row[tier]["resting"], row[tier]["peak"])
        assert n["host"][tier]["per_node"] == row["offload"]["fit"][tier]["per_node"]
        assert n["host"][tier]["fits"] == row["offload"]["fit"][tier]["fits"]
    assert n["peak"] == row["peak"] and n["host"]["host"]["resting"] == row["offload"]["formula"]["host"]
    tl = cli_json(capsys, "timeline", *flags(s), "--stage", "2", "--gpu", s.gpu, "--gpus-per-node", "8",
                  "--efficiency", "peak", "--offload-optimizer", "cpu")
    assert n["step_s"] == tl["step_s"]
    # the time panel reads the collectives as the command does; what else the device waited for is the host's row
    assert (n["compute_s"], n["comm_s"], n["exposed_s"]) == (tl["compute_s"], tl["comm_s"], tl["exposed_comm_s"])
    assert n["host_wait_s"] == n["step_s"] - n["compute_s"] - n["exposed_s"] > 0
    plain = explore(Settings(**SMALL))["host"]
    assert plain["offload"] == "none" and all(plain[t]["resting"] == {} and plain[t]["peak"] == 0
                                              for t in ("host", "nvme"))
    with pytest.raises(ValueError, match="runs at stage 3, not 2"):
        Settings(**SMALL | {"stage": 2, "offload": "params-cpu"}).with_()


def test_the_explorers_step_leaves_out_only_the_sums_it_does_not_show():
    """The explorer asks `measure_stage` for no trace totals (`totals=False`): its row is the full row less "sent"
    and "tiers", and the trace it places in time is the same, event for event."""
    import pickle

    from zerosim.analysis.costs import measure_stage
    from zerosim.explore._settings import model_for

    s = Settings(**SMALL | {"ranks": 16})
    runs = [measure_stage(model_for(s), s.ranks, s.stage, s.optimizer, s.precision, micro_batch=(s.micro_batch,
                          s.seq_len), gpus_per_node=8, totals=totals) for totals in (True, False)]
    (full, full_cluster, _), (row, cluster, _) = runs
    assert set(full) - set(row) == {"sent", "tiers"} and all(row[k] == full[k] for k in row)
    assert full["tiers"]["inter-node"] > 0  # 16 ranks, 8 a node: there was a sum to leave out
    assert pickle.dumps(cluster.trace.events) == pickle.dumps(full_cluster.trace.events)
