"""The memory explorer: sliders (ipywidgets) that drive the meta engine and the timeline, redrawn per setting.

    from zerosim.explore import MemoryExplorer
    MemoryExplorer()                     # in a notebook: the controls and the figure
    MemoryExplorer(model="gpt3-175b", ranks=1024, stage=3)

`explorer_figure(numbers)` draws one setting's numbers (numbers.py `explore`) with no front end at all: left,
what rank 0 holds at the moment of its peak, stacked by memory kind (one colour per kind, viz/palette.py),
beside its model states at rest, against the GPU's capacity line; right, the step's time: compute, the
communication it hid, the communication it waited for. `MemoryExplorer` wires the controls to it; its
`numbers` and `figure` are the last ones drawn, so tests set a control's `value` and read them.
"""

from __future__ import annotations

from zerosim.explore.front_end import draw_into, show

from zerosim.explore.numbers import explore
from zerosim.explore.settings import OPTIMIZERS, PRECISIONS, Settings
from zerosim.viz.palette import kind_colour, kind_label, kind_order

GB = 1e9
RANKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # the N slider's stops
SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384, 32768)  # the L slider's stops
TIME = {"compute": "#f28e2b", "hidden": "#76b7b2", "exposed": "#d62728"}  # timeline_figure.py's forward / comm / red


def explorer_figure(n: dict, fig=None, fontsize: float = 9):
    """Draw `n` (what `explore` returns) into `fig` (default: a new 10 x 4.2 in Figure, no pyplot state kept).

    Every memory segment carries the gid "kind:<kind>" and every time bar "time:<part>", with its value in
    GB or seconds as the bar's height or width: tests read the drawn numbers back from them. Returns the Figure."""
    from matplotlib.figure import Figure

    fig = fig or Figure(figsize=(10, 4.2), dpi=100)
    fig.clear()
    mem, tim = fig.subplots(1, 2, width_ratios=(1.15, 1))
    cols = (("at the peak", n["at_peak"]), ("at rest after the step", n["resting"]))
    for x, (_, held) in enumerate(cols):
        bottom = 0.0
        for kind in kind_order(n["at_peak"]):
            h = held.get(kind, 0) / GB
            if h:
                bar = mem.bar(x, h, 0.55, bottom=bottom, color=kind_colour(kind), edgecolor="white", linewidth=0.5,
                              label=kind_label(kind) if x == 0 else None)[0]
                bar.set_gid(f"kind:{kind}")
                bottom += h
        mem.annotate(f"{bottom:.2f} GB", (x, bottom), xytext=(0, 3), textcoords="offset points", ha="center",
                     fontsize=fontsize)
    cap = n["capacity"] / GB
    mem.axhline(cap, color="black", linestyle="--", linewidth=1, gid="capacity",
                label=f"{n['gpu']}: {cap:.1f} GB (the driver's total)")  # in the legend: no text over the bars
    mem.set_ylim(0, max(cap, n["peak"] / GB) * 1.15)  # the capacity line and the peak both on the axis, from 0
    mem.set_xticks((0, 1), [c for c, _ in cols], fontsize=fontsize)
    mem.set_xlim(-0.5, 1.5)
    mem.set_ylabel("GB on rank 0 (every rank holds the same)", fontsize=fontsize)
    verdict = "fits" if n["fits"] else "does NOT fit"
    mem.set_title(f"{n['model']}, N = {n['ranks']}, ZeRO-{n['stage']}, {n['precision']}:\n"
                  f"peak {n['peak'] / GB:.2f} GB, {verdict}", fontsize=fontsize + 1)
    mem.legend(fontsize=fontsize - 1, frameon=False, loc="upper left", bbox_to_anchor=(0, -0.1), ncol=2)
    mem.spines[["top", "right"]].set_visible(False)
    parts = (("compute", n["compute_s"]), ("hidden", n["comm_s"] - n["exposed_s"]), ("exposed", n["exposed_s"]))
    ms = [v * 1e3 for _, v in parts]
    for y, ((part, _), v) in enumerate(zip(parts, ms)):
        tim.barh(y, v, 0.6, color=TIME[part], gid=f"time:{part}")
        tim.annotate(f"{v:.1f} ms", (v, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=fontsize)
    tim.set_yticks(range(3), ["compute", "communication\nhidden by compute", "communication\nexposed (waited for)"],
                   fontsize=fontsize)
    tim.invert_yaxis()
    tim.set_xlim(0, max(ms) * 1.3 or 1)
    tim.set_xlabel("ms per step (rank 0)", fontsize=fontsize)
    tim.set_title(f"step {n['step_s'] * 1e3:.1f} ms on {n['device']}, {n['link']}", fontsize=fontsize + 1)
    tim.spines[["top", "right"]].set_visible(False)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.9, bottom=0.33, wspace=0.45)
    return fig


class MemoryExplorer:
    """ipywidgets controls for every `Settings` field, redrawing `explorer_figure` when one moves.

    `controls`: {field: widget}; `numbers` / `figure`: the last drawn; `settings`: the controls' current value.
    Displaying the explorer (the last line of a notebook cell) shows the controls above the figure."""

    def __init__(self, **settings):
        import ipywidgets as w

        from zerosim.costs import PRESETS
        from zerosim.costs.gpus import GPUS
        from zerosim.models.gpt import STRATEGIES

        s = Settings().with_(**settings)
        shaped = sorted(k for k, p in PRESETS.items() if p.config is not None)
        self.controls = {
            "model": w.Dropdown(options=sorted({*shaped, s.model}), value=s.model, description="model"),
            "ranks": w.SelectionSlider(options=sorted({*RANKS, s.ranks}), value=s.ranks, description="N ranks"),
            "stage": w.ToggleButtons(options=(0, 1, 2, 3), value=s.stage, description="ZeRO stage"),
            "precision": w.Dropdown(options=PRECISIONS, value=s.precision, description="precision"),
            "optimizer": w.Dropdown(options=OPTIMIZERS, value=s.optimizer, description="optimizer"),
            "seq_len": w.SelectionSlider(options=sorted({*SEQ_LENS, s.seq_len}), value=s.seq_len,
                                         description="seq length"),
            "micro_batch": w.IntSlider(min=1, max=max(16, s.micro_batch), value=s.micro_batch,
                                       description="micro-batch"),
            "checkpoint": w.Dropdown(options=tuple(STRATEGIES), value=s.checkpoint, description="checkpoint"),
            "gpu": w.Dropdown(options=tuple(GPUS), value=s.gpu, description="GPU"),
        }
        self.output = w.Output()
        self.message = w.HTML()
        self.figure = None
        self.numbers = None
        for c in self.controls.values():
            c.observe(lambda _change: self.redraw(), names="value")
        self.widget = w.VBox([w.HBox([w.VBox(list(self.controls.values())[:5]),
                                      w.VBox(list(self.controls.values())[5:])]), self.message, self.output])
        self.redraw()

    @property
    def settings(self) -> Settings:
        return Settings(**{k: c.value for k, c in self.controls.items()})

    def redraw(self) -> None:
        """Run the step for the controls' values and draw it; a setting the model refuses says why, in one line."""

        try:
            self.numbers = explore(self.settings)
        except ValueError as e:  # e.g. a sequence longer than the model's positions: keep the last figure
            self.message.value = f"<b>not drawn:</b> {e}"
            return
        self.message.value = ""
        self.figure = explorer_figure(self.numbers, self.figure)
        draw_into(self.output, self.figure)

    def _ipython_display_(self):
        show(self.widget, self.message.value, self.figure)
