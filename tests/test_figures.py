"""The figures teach what the runs did, and can be trusted at a glance.

Each test checks a drawn figure (its artists, in display coordinates after a draw) against something
independent: the ledger's own peak, seed 001's and seed 004's tables, a hand table of spacings, the
inputs and outputs of a collective. The figures' colours are checked against the one palette.
"""

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

import zerosim
import zerosim.replay
from zerosim import Cluster, reduce_scatter
from zerosim.analysis.costs import measure_by_stage
from zerosim.cli.main import main
from zerosim.models import MLP
from zerosim.models.meta import MetaModel
from zerosim.viz import (
    dataflow_figure,
    kind_colour,
    l_squared_figure,
    ledger_figure,
    measure_ownership,
    memory_by_stage_figure,
    mlp_runs,
    ownership_figure,
    peak_by_stage_figure,
    ring_figure,
    ring_steps_figure,
    spacing_figure,
    strategies_figure,
    zero3_figure,
    zero3_sequence,
)
from zerosim.viz._dataflow import observe
from zerosim.viz._palette import LOSS, PEAK_TICK


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def seed_stage1():
    return zerosim.replay.replay_live(stage=1)[0]


@pytest.fixture(scope="module")
def seed_stage3():
    return zerosim.replay.replay_live(stage=3)[0]


@pytest.fixture(scope="module")
def paper_stages():
    return measure_by_stage(MetaModel.from_params(7_500_000_000, layers=64), ranks=64)


@pytest.fixture(scope="module")
def seed001_lengths():
    """(L, what one block saves by name) at seed 001's 7B shape, B = 4, fp16: the meta ledgers (zerosim figures'
    rows)."""
    from zerosim.analysis.costs import measure_activations
    from zerosim.cli.figures_cmd import SEED001_7B
    from zerosim.models import GPT
    from zerosim.models.gpt import MetaGPT

    return [
        (L, measure_activations(MetaGPT(GPT(seq_len=L, **SEED001_7B)), 4, L).per_block)
        for L in (512, 1024, 2048, 4096, 8192)
    ]


@pytest.fixture(scope="module")
def seed001_strategies():
    from zerosim.analysis.costs import strategy_costs
    from zerosim.cli.figures_cmd import SEED001_7B

    return strategy_costs(4, 2048, **SEED001_7B)


@pytest.fixture(scope="module")
def mlp():
    return mlp_runs()  # notebook 03's MLP [32, 256, 256, 256, 8], 4 ranks, bf16-mixed, one Adam step per stage


def ring_example():
    """Notebook 02's reduce-scatter: rank 0 holds 2048 everywhere, ranks 1-3 hold 1, in fp16."""
    cluster = Cluster(4, keep_values=True)
    x = [np.full(4, 2048, np.float16)] + [np.ones(4, np.float16) for _ in range(3)]
    return cluster, x, reduce_scatter(cluster, x)


def drawn(fig_or_ax):
    fig = getattr(fig_or_ax, "figure", fig_or_ax)
    fig.canvas.draw()
    return fig


def every_figure(seed_stage1, seed_stage3, paper_stages, mlp, lengths=None, strategies=None):
    cluster, x, out = ring_example()
    return {
        **({"l_squared": lambda: l_squared_figure(lengths)} if lengths else {}),
        **({"activation_strategies": lambda: strategies_figure(strategies)} if strategies else {}),
        "memory_by_stage": lambda: memory_by_stage_figure(paper_stages, printed=(120, 31.4, 16.6, 1.9)),
        "memory_by_stage --log": lambda: memory_by_stage_figure(paper_stages, log=True),
        "peak_by_stage": lambda: peak_by_stage_figure(mlp),
        "ledger": lambda: ledger_figure(seed_stage1.cluster),
        "ring": lambda: ring_figure(cluster.trace, 0, inputs=x, outputs=out),
        "ring_steps": ring_steps_figure,
        "spacing": spacing_figure,
        "dataflow": dataflow_figure,
        "ownership": ownership_figure,
        "zero3_sequence": lambda: zero3_figure(seed_stage3.cluster.trace),
    }


# -- no figure function picks a backend (notebook 03's 7.5B figure never appeared because one did) ------

@pytest.mark.slow
def test_no_figure_function_switches_the_backend(
    monkeypatch, seed_stage1, seed_stage3, paper_stages, mlp, seed001_lengths, seed001_strategies
):
    plt.close(plt.figure())  # pyplot settles on its backend at its first figure; from here on nothing may change it
    switched, switch = [], plt.switch_backend
    monkeypatch.setattr(matplotlib, "use", lambda *a, **k: switched.append(a))
    monkeypatch.setattr(plt, "switch_backend", lambda *a, **k: switched.append(a) or switch(*a, **k))
    for name, draw in every_figure(
        seed_stage1, seed_stage3, paper_stages, mlp, seed001_lengths, seed001_strategies
    ).items():
        draw()
        assert not switched, f"{name} switched matplotlib's backend: {switched}"


# -- one colour per memory kind, in every figure -------------------------------------------------------

def _colour(artist):
    if isinstance(artist, Line2D):
        return to_rgb(artist.get_markerfacecolor() if artist.get_linestyle() in ("None", "") else artist.get_color())
    return to_rgb(artist.get_facecolor())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["memory_by_stage", "memory_by_stage --log", "peak_by_stage", "ledger", "ownership",
                                  "zero3_sequence", "l_squared", "activation_strategies"])
def test_every_memory_kind_is_drawn_in_the_palettes_colour(
    name, seed_stage1, seed_stage3, paper_stages, mlp, seed001_lengths, seed001_strategies
):
    fig = drawn(every_figure(seed_stage1, seed_stage3, paper_stages, mlp, seed001_lengths, seed001_strategies)[name]())
    kinds = fig.findobj(lambda a: str(a.get_gid()).startswith("kind:"))
    assert kinds, f"{name} marks no artist with its memory kind"
    for artist in kinds:
        kind = artist.get_gid().removeprefix("kind:")
        assert _colour(artist) == to_rgb(kind_colour(kind)), f"{name}: {kind} drawn in {_colour(artist)}"


def test_the_palette_gives_each_kind_its_own_colour():
    kinds = ["params", "grads", "grad32", "master", "optim:m", "optim:v", "activations", "comm", "scratch"]
    assert len({kind_colour(k) for k in kinds}) == len(kinds)
    assert kind_colour("optim:something new") == kind_colour("optim:something new")  # the same colour every time


# -- the MLP chart stacks the true peak moment ---------------------------------------------------------

P_MLP = (32 * 256 + 256) + 2 * (256 * 256 + 256) + (256 * 8 + 8)  # 142,088 parameters


def test_mlp_peak_bars_are_the_ledgers_true_peaks(mlp):
    ax = peak_by_stage_figure(mlp)
    for i, (label, ledger) in enumerate(mlp):
        segments = [
            p
            for p in ax.patches
            if isinstance(p, Rectangle) and p.get_gid() and abs(p.get_x() + p.get_width() / 2 - i) < 1e-9
        ]
        top = max(p.get_y() + p.get_height() for p in segments)
        assert top * 1e6 == pytest.approx(ledger.peak(), rel=1e-12), label  # the bar's top is the ledger's own peak
        per_kind_peaks = sum(ledger.peak_by_kind().values())
        if label in ("stage 2", "stage 3"):  # the old chart stacked these, which never happen at once
            assert per_kind_peaks > 1.15 * ledger.peak()
    # by hand, bf16 = 2 B, fp32 = 4 B per parameter, 4 ranks:
    assert mlp[0][1].peak() == 20 * P_MLP  # stage 0 in the optimizer step: 2 + 2 + 4 + 4 + 4 + the fp32 gradient 4
    # stage 1: 2 + 2 (whole) + (4 + 4 + 4 + 4) / 4 (its shard, and its fp32 gradient)
    assert mlp[1][1].peak() == 8 * P_MLP


# -- notebook 01's ledger chart: a legend over no bar, a black tick at each peak -----------------------

@pytest.mark.slow
def test_ledger_figure_legend_covers_no_bar_and_ticks_mark_each_peak(seed_stage1):
    cluster = seed_stage1.cluster
    ax = ledger_figure(cluster)
    fig = drawn(ax)
    legend = ax.get_legend().get_window_extent()
    bars = [p for p in ax.patches if str(p.get_gid()).startswith("kind:")]
    assert bars and not any(legend.overlaps(b.get_window_extent()) for b in bars)
    ticks = [c for c in fig.findobj(lambda a: a.get_gid() == "peak")]
    peaks = [peak for r in cluster.ranks for (_, peak, _) in r.ledger.by_phase()]
    drawn_peaks = sorted(float(seg[0][1]) for t in ticks for seg in t.get_segments())
    assert drawn_peaks == sorted(peaks)  # one tick per (phase, GPU), at the phase's peak
    assert all(to_rgb(t.get_color()[0]) == to_rgb(PEAK_TICK) for t in ticks)


# -- the 4-rank ring figure --------------------------------------------------------------------------

def _boxes(ax):
    out = []
    for t in ax.texts:
        patch = t.get_bbox_patch()
        out.append((t.get_text(), (patch or t).get_window_extent()))
    return out


def test_ring_figure_labels_do_not_overlap_and_show_the_rounding_and_the_shards():
    cluster, x, out = ring_example()
    ax = ring_figure(cluster.trace, 0, inputs=x, outputs=out)
    drawn(ax)
    boxes = _boxes(ax)
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            assert not box_a.overlaps(box_b), f"labels overlap: {a!r} and {b!r}"
    texts = {t.get_text(): t for t in ax.texts}
    # chunk 2 starts at rank 3: rank 0 adds its 2048 to rank 3's 1 = 2049, a tie fp16 rounds to 2048
    loss = [t for s, t in texts.items() if s.startswith("chunk 2: 1 + 2048") and "2049 → 2048" in s]
    assert loss and to_rgb(loss[0].get_color()) == to_rgb(LOSS)
    # the final shards, as the call returned them (notebook 02: 2052, 2052, 2048, 2048)
    finals = {int(s.split()[2].rstrip(":")): s for s in texts if s.startswith("owns chunk")}
    assert sorted(finals) == [0, 1, 2, 3]
    for r, s in finals.items():
        assert s.endswith(f"{float(out[r][0]):g} in fp16") or s.endswith(f"= {float(out[r][0]):g}")


@pytest.mark.slow
def test_ring_steps_figure_draws_both_halves_of_the_all_reduce():
    fig = drawn(ring_steps_figure())
    top, bottom = fig.axes
    assert any("2049 → 2048" in t.get_text() for t in top.texts)
    assert sum(t.get_text() == "holds [2052, 2052, 2048, 2048]" for t in bottom.texts) == 4  # every rank, the whole sum


# -- zerosim figures --log: no stacked bars on a log axis; ZeRO-3's bar visible -------------------------

@pytest.mark.slow
def test_log_memory_figure_draws_no_bars(paper_stages):
    fig = drawn(memory_by_stage_figure(paper_stages, log=True))
    (ax,) = fig.axes
    assert ax.get_yscale() == "log"
    assert not [p for p in ax.patches if isinstance(p, Rectangle) and p.get_height() > 0]


def test_zero3_bar_is_visible(paper_stages):
    fig = drawn(memory_by_stage_figure(paper_stages))
    (inset,) = [c for a in fig.axes for c in a.child_axes if c.get_gid() == "inset"]
    segments = [p for p in inset.patches if str(p.get_gid()).startswith("kind:")]
    heights = [p.get_window_extent().height for p in segments]
    assert sum(heights) >= 60  # pixels; in the main axes 1.875 GB of 146 is ~8 px, its five kinds ~1-3 px each
    assert min(heights) >= 5


# -- one figure per seed diagram ------------------------------------------------------------------------

@pytest.mark.slow
def test_spacing_figure_matches_a_hand_table_and_marks_the_lost_update():
    ax = spacing_figure()
    lines = {a.get_gid(): a for a in ax.lines if a.get_gid()}
    # spacing at 1.0 (the gap above it) = 2**-mantissa_bits; 1 + 1e-5 survives only where 1e-5 > half of it
    table = {"fp32": (2.0**-23, "kept"), "bf16": (2.0**-7, "lost"), "fp16": (2.0**-10, "lost"),
             "fp8_e4m3": (2.0**-3, "lost"), "fp8_e5m2": (2.0**-2, "lost")}
    for fmt, (spacing, fate) in table.items():
        x, y = lines[f"format:{fmt}"].get_data()
        assert y[np.searchsorted(x, 1.0)] == spacing
        assert lines[f"{fate}:{fmt}"].get_ydata()[0] == spacing


@pytest.mark.slow
def test_dataflow_casts_are_where_the_run_made_them():
    # seed 002's two pictures; the fp32 run has no cast at all
    assert observe("fp16-mixed") == {
        "name": "fp16-mixed",
        "data": "fp32",
        "master": "fp32",
        "update": "fp32",
        "params": "fp16",
        "activations": "fp16",
        "grads": "fp16",
        "wire": "fp16",
        "grad32": "fp32",
        "state": "fp32",
        "loss_scale": 1.0,
        "scaler": "static",
        "unscale": "reciprocal",
        "stage": 1,
        "refresh": ("all_gather", "fp16"),  # ZeRO-1: each rank updated its 1/N, the all-gather hands out the rest
        "overflow": "raise",  # a static scale raises on an inf/NaN; it skips nothing
        "skipped": (),
        # rank 0's reduce-scatter: one 2-element fp16 chunk (4 B); an all-reduce sends its all-gather half too (8 B)
        "reduce": ("reduce_scatter", 4, 8),
    }
    fig = dataflow_figure([zerosim.get_precision("fp16-mixed").with_(loss_scale=1024.0), "bf16-mixed", "fp32"])
    casts = [sorted(t.get_text() for t in ax.texts if t.get_gid() == "cast") for ax in fig.axes]
    assert casts == [
        ["cast fp16 → fp32", "cast fp32 → fp16", "cast fp32 → fp16"],  # gradients up; master and micro-batch down
        ["cast bf16 → fp32", "cast fp32 → bf16", "cast fp32 → bf16"],
        [],
    ]
    assert any("× S = 1024" in t.get_text() for t in fig.axes[0].texts)
    assert any("× 1/S" in t.get_text() for t in fig.axes[0].texts)  # unscaled by the reciprocal, as torch and DeepSpeed
    # a dynamic scaler: the first step that updated, at the scale it used (its LossScaleUpdate event). Seed 004's
    # gradients reach 11 (fp16-mixed: 11·2**16 > 65504), so DeepSpeed's 2**16 overflows; hysteresis 2 keeps S
    # once, then it halves to 2**15 (11·2**15 = 360448 still overflows), 2**14, 2**13, 2**12: 11·2**12 = 45056 fits
    (ax,) = dataflow_figure([zerosim.get_precision("fp16-mixed").with_(loss_scale="deepspeed")]).axes
    assert ax.get_title(loc="left").endswith("deepspeed's dynamic loss scale, this step S = 4096")


SHARDED = {0: set(), 1: {"master", "optim:m", "optim:v"}, 2: {"grads", "master", "optim:m", "optim:v"},
           3: {"params", "grads", "master", "optim:m", "optim:v"}}  # seed 001's diagrams, stage by stage


def test_ownership_follows_seed_001_from_the_ledgers():
    stages = measure_ownership(MLP([16, 32, 32, 8]), 4)
    for st in stages:
        for r, row in enumerate(st["ranks"]):
            for kind, (frac, offset) in row.items():
                assert (frac, offset) == ((0.25, r / 4) if kind in SHARDED[st["stage"]] else (1.0, 0.0)), (
                    st["stage"],
                    r,
                    kind,
                )
    fig = ownership_figure(MLP([16, 32, 32, 8]), 4)
    lane = {"params": "W", "grads": "G", "master": "OS", "optim:m": "OS", "optim:v": "OS"}
    for ax in fig.axes:  # a block is a quarter of its lane, or all of it
        frames = {p.get_gid(): p.get_width() for p in ax.patches if str(p.get_gid()).startswith("lane:")}
        fractions = {round(p.get_width() / frames["lane:" + lane[p.get_gid()[5:]]], 9) for p in ax.patches
                     if str(p.get_gid()).startswith("kind:")}
        assert fractions <= {0.25, 1.0}


def test_zero3_sequence_is_seed_004s(seed_stage3):
    seq = zero3_sequence(seed_stage3.cluster.trace, rank=0)
    # seed 004, stage 3: layer 1 for forward, layer 2 for forward, layer 1 to recompute a, layer 2 for backward,
    # layer 1 for backward; each gathered copy freed right after (layer1 = 0, layer2 = 2 in TinyNet's layers)
    assert [(s["layer"], s["computes"], s["values"]) for s in seq["spans"]] == [
        (0, ["forward"], [2, -3]), (2, ["forward"], [1, 0.5]), (0, ["recompute"], [2, -3]),
        (2, ["backward"], [1, 0.5]), (0, ["backward"], [2, -3])]
    reduces = [layer for _, what, layer, _ in seq["events"] if what == "reduce"]
    assert reduces == [2, 0]  # each layer's gradients reduce-scattered right after its backward
    ax = zero3_figure(seed_stage3.cluster.trace)
    assert len([p for p in ax.patches if p.get_gid() == "kind:params"]) == 5


@pytest.mark.slow
def test_figures_only_writes_the_named_figures(tmp_path, capsys):
    assert main(["figures", "--out", str(tmp_path), "--only", "spacing", "--only", "zero3_sequence"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spacing.png", "zero3_sequence.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in tmp_path.iterdir())


def test_figures_on_two_workers_write_the_same_files_and_say_the_same(tmp_path, capsys):
    # --jobs 2: each figure drawn on a worker and saved to bytes there, every file written here; a slides figure's
    # stage frames too (PNG: the same bytes whoever draws it; an SVG's date and ids differ from run to run anyway)
    made = {}
    for jobs in ("1", "2"):
        out = tmp_path / jobs
        assert main(["figures", "--out", str(out), "--style", "slides", "--only", "memory_by_stage", "--only",
                     "ring_steps", "--jobs", jobs]) == 0
        made[jobs] = ({p.name: p.read_bytes() for p in out.iterdir()},
                      capsys.readouterr().out.replace(str(out), "OUT"))
    assert made["2"] == made["1"]
    files, said = made["1"]
    assert sorted(files) == ["memory_by_stage.png", *(f"memory_by_stage_stage{k}.png" for k in range(4)),
                             "ring_steps.png"]
    assert said == ("wrote OUT/memory_by_stage.png\n  and 4 frames, one stage more each: memory_by_stage_stage0 .. "
                    "memory_by_stage_stage3\nwrote OUT/ring_steps.png\n")
    from zerosim.cli.figures_cmd import FIGURES, LONGEST

    assert set(LONGEST) <= set(FIGURES)  # the figures handed to workers first are figures (a renamed one: not lost)


@pytest.mark.bad_input("command line")
def test_figures_unknown_name_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        main(["figures", "--only", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err


@pytest.mark.bad_input("command line")
def test_a_bad_model_flag_is_refused_before_any_figure_is_written(tmp_path, capsys):
    # memory_by_stage reads the model's flags; drawn after ring_steps, its --ranks 0 was refused once ring_steps.png
    # had been written. Now read before the first figure: no folder, no file.
    out = tmp_path / "figs"
    argv = ["figures", "--out", str(out), "--only", "ring_steps", "--only", "memory_by_stage", "--ranks", "0"]
    assert main(argv) == 2
    assert "--ranks must be at least 1, got 0" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("flags, named", [
    (("--params", "-5"), "--params"),  # a bad value nothing reads was accepted in silence
    (("--ranks", "1024", "--log"), "--ranks, --log"),
    (("--model", "gpt3-175b", "--precision", "bf16-mixed"), "--model, --precision"),
])
def test_model_flags_without_memory_by_stage_are_refused(flags, named, tmp_path, capsys):
    out = tmp_path / "figs"
    assert main(["figures", "--out", str(out), "--only", "spacing", *flags]) == 2
    assert f"{named} only change(s) memory_by_stage, which --only leaves out" in capsys.readouterr().err
    assert not out.exists()


def test_log_keeps_the_stage_frames_of_the_figures_it_does_not_draw(tmp_path, capsys):
    # --log draws memory_by_stage as points (no frames); peak_by_stage beside it keeps its four
    assert main(["figures", "--out", str(tmp_path), "--only", "memory_by_stage", "--only", "peak_by_stage", "--log",
                 "--style", "slides", "--params", "1e9", "--ranks", "4"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory_by_stage.png", "peak_by_stage.png",
                                                          *(f"peak_by_stage_stage{k}.png" for k in range(4))]


# -- seed 001 §5: the L² term and the checkpointing strategies, from the meta ledgers -------------------

def test_l_squared_figure_draws_the_ledgers_bytes_and_its_labels_never_meet(seed001_lengths):
    ax = l_squared_figure(seed001_lengths)
    fig = drawn(ax)
    linear, p = (line for line in ax.lines if line.get_gid() == "kind:activations")
    for (L, per_block), x, y_rest, y_p in zip(seed001_lengths, linear.get_xdata(), linear.get_ydata(), p.get_ydata()):
        B, H, d = 4, 32, 4096
        assert x == L and y_p * 1e9 == pytest.approx(B * H * L * L * 2, rel=1e-12)  # seed 001: B·H·L²·2 bytes
        # 14·B·L·d·2 + LN statistics
        assert y_rest * 1e9 == pytest.approx(14 * B * L * d * 2 + 4 * B * L * 4, rel=1e-12)
    assert [round(v, 2) for v in p.get_ydata()] == [0.07, 0.27, 1.07, 4.29, 17.18]  # "≈ 1.07 GB", "≈ 17.2 GB per layer"
    boxes = [(t.get_text(), t.get_window_extent()) for t in ax.texts]
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            assert not box_a.overlaps(box_b), f"labels overlap: {a!r} and {b!r}"
    legend = ax.get_legend().get_window_extent(fig.canvas.get_renderer())
    assert not any(legend.overlaps(box) for _, box in boxes)


def test_strategies_figure_bars_are_the_measured_peaks_and_flops(seed001_strategies):
    fig = drawn(strategies_figure(seed001_strategies))
    mem, flops = fig.axes
    memory_bars = [p for p in mem.patches if p.get_gid() == "kind:activations"]
    assert [b.get_width() * 1e9 for b in memory_bars] == pytest.approx(
        [r["peak"] for r in seed001_strategies], rel=1e-12
    )
    assert [b.get_width() for b in flops.patches] == pytest.approx(
        [100 * r["extra"] for r in seed001_strategies], rel=1e-12
    )
    from zerosim.viz._palette import KINDS
    # FLOPs: no kind's
    assert to_rgb(flops.patches[0].get_facecolor()) not in {to_rgb(colour) for _, colour in KINDS.values()}
    block = next(r for r in seed001_strategies if r["strategy"] == "block")
    # seed 001: "approximately 1/3 extra compute". By hand: a step is a forward and a backward of twice its FLOPs, and
    # block checkpointing runs the blocks' forward once more, not the embedding's or the head's (the frameworks
    # checkpoint the blocks only): extra = F_blocks / (3·(F_blocks + F_head)), each block's products 24·B·L·d² and
    # attention's 4·B·L²·d, the head's 2·B·L·d·V (B = 4, L = 2048, seed 001's 7B shape); the norms, the elementwise
    # kernels and the loss are left out of the hand count, so it holds to 0.001
    B, L, d, V, n = 4, 2048, 4096, 50257, 32
    blocks, head = n * (24 * B * L * d * d + 4 * B * L * L * d), 2 * B * L * d * V
    assert abs(block["extra"] - blocks / (3 * (blocks + head))) < 0.001
    assert block["extra"] < 1 / 3 - 0.005  # the head's forward, 1 % of the step's FLOPs, is not run again
    labels = [t.get_window_extent() for ax in fig.axes for t in ax.texts]
    assert not any(a.overlaps(b) for i, a in enumerate(labels) for b in labels[i + 1:])
    line = flops.transData.transform((100 / 3, 0))[0]  # the seed's 1/3 in pixels: no label lies across it
    assert not any(t.get_window_extent().x0 < line < t.get_window_extent().x1 for t in flops.texts)


def test_the_memory_pages_strategy_table_is_the_measured_rows(seed001_strategies):
    """docs/explanation/memory.md's table of checkpointing strategies at seed 001's 7B shape quotes the rows the
    figure draws (`strategy_costs`): each strategy's peak activations and its extra FLOPs."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "explanation" / "memory.md").read_text()
    rows = {r["strategy"]: r for r in seed001_strategies}
    quoted = {name: (peak, extra) for name, peak, extra in
              re.findall(r"^\| `(\w[\w-]*)` \| [^|]+\| ([\d.]+ GB)[^|]*\| ([^|]+)\|$", page, re.M)}
    assert set(quoted) == set(rows), quoted
    for name, (peak, extra) in quoted.items():
        r = rows[name]
        digits = len(peak.split()[0].split(".")[1])
        assert peak == f"{r['peak'] / 1e9:.{digits}f} GB", (name, peak)
        assert extra.strip().startswith("—" if r["extra"] == 0 else f"+{100 * r['extra']:.1f}%"), (name, extra)


def test_the_lost_marker_is_told_apart_from_every_chunk_and_format_colour():
    """Issue 24: LOSS was red beside chunk 3's red (ring_steps.png) and fp8's red (spacing.png). Euclidean distance
    in 0-255 RGB: 100 is about the distance between the palette's blue and its orange; nearby reds were 60 apart."""
    from matplotlib.colors import to_rgb

    from zerosim.viz._palette import CHUNKS, FORMATS, LOSS

    def distance(a, b):
        return sum((255 * (x - y)) ** 2 for x, y in zip(to_rgb(a), to_rgb(b))) ** 0.5

    assert distance("#4c72b0", "#dd8452") > 100  # the yardstick: blue against orange
    assert min(distance(LOSS, c) for c in (*CHUNKS, *FORMATS.values())) > 100


@pytest.mark.slow  # Llama-7B's step simulated twice (~2 s)
def test_timeline_figure_does_not_call_the_no_prefetch_schedule_seed_004():
    """Issue 24: the no-prefetch schedule was labelled "seed 004" (seed 004 is a 4-weight example, not a schedule)."""
    import argparse

    from zerosim.cli.figures_cmd import FIGURES

    fig = FIGURES["timeline"](argparse.Namespace())
    titles = [ax.get_title(loc="left") or ax.get_title() for ax in fig.axes]
    assert any(t.startswith("no prefetch") for t in titles) and not any("seed 004" in t for t in titles)
