"""The memory explorer: sliders (ipywidgets) that drive the meta engine and the timeline, redrawn per setting.

    from zerosim.explore import MemoryExplorer
    MemoryExplorer()                     # in a notebook: the controls and the figure
    MemoryExplorer(model="gpt3-175b", ranks=1024, stage=3)
    MemoryExplorer(model="llama-2-13b", ranks=1, stage=2, gpu="v100-32gb", precision="fp16-mixed",
                   offload="optimizer-cpu")     # a V100 has no bf16 units: its step is timed in fp16

`explorer_figure(numbers)` draws one setting's numbers (_numbers.py `explore`) with no front end at all: left,
what rank 0 holds at the moment of its peak, stacked by memory kind (one colour per kind, viz/_palette.py),
beside its model states at rest, against the GPU's capacity line; right, the step's time: compute, the
communication it hid, the communication it waited for; with an offload placement a third column, what rank 0's
host holds (_canvas.py). `MemoryExplorer` wires the controls to one such figure,
moved in place at every redraw (_canvas.py); its `numbers` and `figure` are the last ones drawn, so tests
set a control's `value` and read them.
"""

from __future__ import annotations

from zerosim.explore._canvas import ExplorerCanvas
from zerosim.explore._front_end import live, show
from zerosim.explore._numbers import explore
from zerosim.explore._settings import OPTIMIZERS, Settings

RANKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # the N slider's stops
SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384, 32768)  # the L slider's stops


def explorer_figure(n: dict, fig=None, fontsize: float = 9):
    """Draw `n` (what `explore` returns) into `fig` (default: a new 10 x 4.2 in Figure, no pyplot state kept).

    A figure this function made before is moved to the new numbers in place (_canvas.py: the same bars,
    labels and axes, nothing rebuilt). Every memory segment carries the gid "kind:<kind>" and every time bar
    "time:<part>", with its value in GB or ms as the bar's height or width: tests read the drawn numbers back from
    them. Returns the Figure."""
    canvas = getattr(fig, "zerosim_canvas", None)
    if canvas is None or canvas.fontsize != fontsize:
        canvas = ExplorerCanvas(fontsize, figure=fig)
    return canvas.update(n)


class MemoryExplorer:
    """ipywidgets controls for every `Settings` field, redrawing `explorer_figure` when one moves.

    `controls`: {field: widget}; `numbers` / `figure`: the last drawn; `settings`: the controls' current value.
    Displaying the explorer (the last line of a notebook cell) shows the controls above the figure."""

    def __init__(self, **settings):
        import ipywidgets as w

        from zerosim.analysis.costs import GPUS, MEMORY_PRECISIONS, PRESETS
        from zerosim.models.gpt import STRATEGIES
        from zerosim.parallel.data import STAGES
        from zerosim.parallel.offload import PLACEMENTS

        s = Settings().with_(**settings)
        shaped = sorted(k for k, p in PRESETS.items() if p.config is not None)
        self.controls = {
            "model": w.Dropdown(options=sorted({*shaped, s.model}), value=s.model, description="model"),
            "ranks": w.SelectionSlider(options=sorted({*RANKS, s.ranks}), value=s.ranks, description="N ranks"),
            "stage": w.ToggleButtons(options=STAGES, value=s.stage, description="ZeRO stage"),
            "precision": w.Dropdown(options=tuple(MEMORY_PRECISIONS), value=s.precision, description="precision"),
            "optimizer": w.Dropdown(options=OPTIMIZERS, value=s.optimizer, description="optimizer"),
            "seq_len": w.SelectionSlider(options=sorted({*SEQ_LENS, s.seq_len}), value=s.seq_len,
                                         description="seq length"),
            "micro_batch": w.IntSlider(min=1, max=max(16, s.micro_batch), value=s.micro_batch,
                                       description="micro-batch"),
            "checkpoint": w.Dropdown(options=tuple(STRATEGIES), value=s.checkpoint, description="checkpoint"),
            "gpu": w.Dropdown(options=tuple(GPUS), value=s.gpu, description="GPU"),
            "offload": w.Dropdown(options=tuple(PLACEMENTS), value=s.offload, description="offload"),
        }
        self.canvas = ExplorerCanvas()  # one figure for every redraw: its artists move (_canvas.py)
        self.image = w.Image(format="png")  # live: the canvas's PNG, replaced in place at each redraw
        self.message = w.HTML()
        self.figure = None
        self.numbers = None
        for c in self.controls.values():
            c.observe(lambda _change: self.redraw(), names="value")
        self.widget = w.VBox([w.HBox([w.VBox(list(self.controls.values())[:5]),
                                      w.VBox(list(self.controls.values())[5:])]), self.message, self.image])
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
        self.figure = self.canvas.update(self.numbers)
        if live():  # one render of what changed, straight into the image (headless, `show` displays the figure)
            self.image.value = self.canvas.png()

    def _ipython_display_(self):
        show(self.widget, self.message.value, self.figure)
