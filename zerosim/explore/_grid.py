"""The web page's data: the memory explorer's numbers (_numbers.py `explore`) at every point of a grid.

The page has no Python behind it, so every setting a slider can reach is run here, once, on the meta backend,
and written into the page. A grid is a few values per axis (model, N, stage, sequence length, checkpointing)
with the rest fixed; `DEFAULT` is what `zerosim explore --html` writes, `SMALL` what the tests write (seconds).
A point the model refuses (a sequence longer than its positions) holds the one-line reason instead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import product

from zerosim.explore._numbers import explore
from zerosim.explore._settings import Settings
from zerosim.viz import kind_colour, kind_label, kind_order

AXES = ("model", "ranks", "stage", "seq_len", "checkpoint")  # the page's controls, in order


@dataclass(frozen=True)
class Grid:
    """The values each control takes; `fixed` sets every other `Settings` field."""

    model: tuple = ("llama-2-7b", "llama-3-8b", "llama-2-70b", "gpt3-175b")
    ranks: tuple = (8, 64, 512, 1024)
    stage: tuple = (0, 1, 2, 3)
    seq_len: tuple = (2048, 4096)
    checkpoint: tuple = ("none", "block")
    fixed: Settings = Settings()

    def settings(self):
        """Every point's Settings, in the order the page's key lists them."""
        for values in product(*(getattr(self, a) for a in AXES)):
            yield self.fixed.with_(**dict(zip(AXES, values)))

    @property
    def size(self) -> int:
        n = 1
        for a in AXES:
            n *= len(getattr(self, a))
        return n


DEFAULT = Grid()
SMALL = Grid(model=("gpt2-small", "gpt2-medium"), ranks=(2, 16), stage=(0, 1, 2, 3), seq_len=(256, 1024),
             checkpoint=("none", "block"),
             fixed=Settings(model="gpt2-small", ranks=2, seq_len=1024, gpu="rtx3090"))


def key(s: Settings) -> str:
    """A point's key in the page's data: its axis values joined by '|'."""
    return "|".join(str(getattr(s, a)) for a in AXES)


def grid_data(grid: Grid = DEFAULT, show_progress: bool | None = None) -> dict:
    """{"axes": {axis: values}, "fixed": {field: value}, "kinds": {kind: [label, colour]}, "points": {key:
    numbers or {"error": reason}}}: what the page draws from (JSON-ready)."""
    from zerosim.progress import progress

    points, kinds = {}, set()
    for s in progress(list(grid.settings()), "grid points", enabled=show_progress, unit="point"):
        try:
            n = explore(s)
        except ValueError as e:  # e.g. seq_len past the model's positions: the page says why instead of drawing
            points[key(s)] = {"error": str(e)}
            continue
        kinds |= set(n["at_peak"]) | set(n["resting"])
        points[key(s)] = n
    return {
        "axes": {a: list(getattr(grid, a)) for a in AXES},
        "fixed": {k: v for k, v in asdict(grid.fixed).items() if k not in AXES},
        "kinds": {k: [kind_label(k), kind_colour(k)] for k in kind_order(kinds)},
        "points": points,
    }
