"""The memory explorer's figure, built once and moved to each new setting: a redraw changes bar heights, labels
and limits in place, and renders only what changed.

Rebuilding the figure per slider move (new axes, bars, legend, ticks) and rendering every text of it again took
650-1110 ms a redraw here (benchmarks/explorer.py), most of it laying out and rasterising text that had not
changed. `ExplorerCanvas.update(n)` sets the new numbers on the same artists; `png()` renders: the axes, ticks and
legend (the background) are rasterised again only when their scale or legend changed — limits are rounded up to
1, 2, 2.5 or 5 x 10^k so most moves keep them — and otherwise the saved background is restored and only the bars,
value labels, titles and capacity line are drawn over it (matplotlib's blitting: `copy_from_bbox`,
`restore_region`, `draw_artist`). The legend is laid out once per change of what it lists (explore/_key.py), a
text drawn before at the same place is pasted from its kept pixels (explore/_text_raster.py), and the frame is
written as PNG by zlib without filtering (explore/_png.py).

What it draws is `memory_explorer.explorer_figure`'s picture: left, what rank 0 holds at the moment of its peak,
stacked by memory kind (one colour per kind, viz/_palette.py), beside its model states at rest, against the GPU's
capacity line; right, the step's time: compute, the communication it hid, the communication it waited for.
With an offload placement (`Settings.offload`) a third column, the host column, stacks what rank 0's host ledger
holds at rest by the same kinds (its peak and the node's verdict in the column's label and the title).
Every memory segment carries the gid "kind:<kind>" (on the host "host:<kind>"; hidden and without it when the kind
holds nothing) and every time bar "time:<part>", with its value in GB or ms as the bar's height or width: tests read
the numbers back.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.explore._key import Key
from zerosim.explore._png import png_bytes
from zerosim.explore._text_raster import TextRaster
from zerosim.viz import kind_colour, kind_label, kind_order

GB = 1e9
# viz/_timeline.py's forward / comm / red; the host's: viz/_offload_step.py's CPU optimizer step
TIME = {"compute": "#f28e2b", "hidden": "#76b7b2", "exposed": "#d62728", "host": "#9c755f"}
COLUMNS = ("at the peak", "at rest after the step", "host, at rest")
GIDS = ("kind", "kind", "host")  # the gid prefix of each column's segments
PARTS = ("compute", "hidden", "exposed", "host")  # "host": waiting for offload's copies and CPU step (offload only)
BACKGROUNDS = 8  # rasterised backgrounds kept (1.7 MB each): a slider moved back and forth finds its own again


def nice_ceiling(x: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k at or above x (x > 0): axis limits that stay put while a slider moves."""
    if not x > 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(x))
    return next(m * scale for m in (1, 2, 2.5, 5, 10) if m * scale >= x * (1 - 1e-12))


class ExplorerCanvas:
    """One explorer figure (`figure`: a new 10 x 4.2 in Figure, or the one given, cleared) whose artists `update(n)`
    moves to the numbers `n` (_numbers.py `explore`); `png()` renders it as a PNG."""

    def __init__(self, fontsize: float = 9, figure=None, text_raster: bool = True):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.fontsize, self.text_raster = fontsize, text_raster  # keep each text's pixels (_text_raster.py)
        self.figure = fig = figure if figure is not None else Figure(figsize=(10, 4.2), dpi=100)
        fig.clear()
        if not isinstance(fig.canvas, FigureCanvasAgg):  # no backend yet: Agg, for png()'s blitting
            FigureCanvasAgg(fig)
        fig.zerosim_canvas = self  # explorer_figure(n, fig) finds it again
        self.mem, self.tim = mem, tim = fig.subplots(1, 2, width_ratios=(1.15, 1))
        mem.set_xticks((0, 1), COLUMNS[:2], fontsize=fontsize)
        mem.set_xlim(-0.5, 1.5)
        mem.set_ylabel("GB on rank 0 (every rank holds the same)", fontsize=fontsize)
        mem.spines[["top", "right"]].set_visible(False)
        self.bars = {}  # kind -> [its segment at the peak, its segment at rest]
        self.totals = [mem.annotate("", (x, 0), xytext=(0, 3), textcoords="offset points", ha="center",
                                    fontsize=fontsize) for x in range(len(COLUMNS))]
        self.capacity = mem.axhline(0, color="black", linestyle="--", linewidth=1, gid="capacity")
        self.time_bars = [tim.barh(y, 0, 0.6, color=TIME[part], gid=f"time:{part}")[0] for y, part in enumerate(PARTS)]
        self.time_labels = [tim.annotate("", (0, y), xytext=(3, 0), textcoords="offset points", va="center",
                                         fontsize=fontsize) for y in range(len(PARTS))]
        self._time_ticks(3)
        tim.set_xlabel("ms per step (rank 0)", fontsize=fontsize)
        tim.spines[["top", "right"]].set_visible(False)
        fig.subplots_adjust(left=0.08, right=0.98, top=0.9, bottom=0.33, wspace=0.45)
        # the memory panel's x axis and the time panel's y axis have no label: fixed coordinates spare matplotlib
        # laying their tick labels out a second time to place it (axis.py `Axis._update_label_position`, a tenth of a
        # full draw here)
        mem.xaxis.set_label_coords(0.5, 0)
        tim.yaxis.set_label_coords(0, 0.5)
        self.key = Key(mem, (0, -0.1), fontsize - 1)  # the legend, below the memory panel
        self._legend = None  # the (kinds, capacity label) the legend shows
        self._backgrounds = {}  # (limits, legend) -> the rasterised axes without the moving artists

    def _time_ticks(self, rows: int) -> None:
        """The time panel's rows: the first three, and with offload the host's (what the device waited for)."""
        labels = ["compute", "communication\nhidden by compute", "communication\nexposed (waited for)",
                  "host: copies, CPU step\n(waited for)"]
        self.tim.set_yticks(range(rows), labels[:rows], fontsize=self.fontsize)
        self.tim.set_ylim(rows - 0.5, -0.5)  # the first row on top

    def _bar(self, kind: str) -> list:
        if kind not in self.bars:
            self.bars[kind] = [self.mem.bar(x, 0, 0.55, color=kind_colour(kind), edgecolor="white", linewidth=0.5)[0]
                               for x in range(len(COLUMNS))]
        return self.bars[kind]

    def update(self, n: dict):
        """Move every artist to the numbers `n`; returns the Figure."""
        host = n.get("host") or {"offload": "none"}  # the host column (_numbers.py), empty without offload
        offloaded = host["offload"] != "none"
        columns = (n["at_peak"], n["resting"], host["host"]["resting"] if offloaded else {})
        kinds = kind_order({*n["at_peak"], *columns[2]})
        for kind in set(self.bars) - set(kinds):  # a kind this setting does not hold: hidden, and no gid to read
            for bar in self.bars[kind]:
                bar.set_visible(False)
                bar.set_gid(None)
        for x, held in enumerate(columns):
            bottom = 0.0
            for kind in kinds:
                bar, h = self._bar(kind)[x], held.get(kind, 0) / GB
                bar.set_visible(bool(h))
                bar.set_gid(f"{GIDS[x]}:{kind}" if h else None)
                bar.set_y(bottom)
                bar.set_height(h)
                bottom += h
            self.totals[x].set_text(f"{bottom:.2f} GB" if x < 2 else
                                    f"{bottom:.1f} GB\n(peak {host['host']['peak'] / GB:.1f})" if offloaded else "")
            self.totals[x].xy = (x, bottom)
        shown = len(COLUMNS) if offloaded else 2
        if self.mem.get_xlim()[1] != shown - 0.5:  # the host column appears or goes
            self.mem.set_xticks(range(shown), COLUMNS[:shown], fontsize=self.fontsize)
            self.mem.set_xlim(-0.5, shown - 0.5)
        cap = n["capacity"] / GB
        self.capacity.set_ydata([cap, cap])
        self.capacity.set_label(f"{n['gpu']}: {cap:.1f} GB (the driver's total)")  # legend: no text over the bars
        top = max(cap, n["peak"] / GB, sum(columns[2].values()) / GB)  # the capacity line, the peak, the host column
        self.mem.set_ylim(0, nice_ceiling(top * 1.15))
        verdict = "fits" if n["fits"] else "does NOT fit"
        node = "" if not offloaded else (
            f"; host: {host['host']['per_node'] / 1e12:.2f} of {host['host']['capacity'] / 1e12:.2f} TB a node, "
            + ("fits" if host["host"]["fits"] and host["nvme"]["fits"] else "does NOT fit"))
        self.mem.set_title(f"{n['model']}, N = {n['ranks']}, ZeRO-{n['stage']}, {n['precision']}:\n"
                           f"peak {n['peak'] / GB:.2f} GB + {n['estimates'] / GB:.2f} GB no ledger sees, {verdict}"
                           f"{node}", fontsize=self.fontsize + 1)
        legend = (tuple(k for k in kinds if n["at_peak"].get(k) or columns[2].get(k)), self.capacity.get_label())
        if legend != self._legend:  # a legend is laid out again only when what it lists changes (_key.py)
            self._legend = legend
            self.key.show([(kind_label(k), ("box", kind_colour(k), "white", 0.5)) for k in legend[0]]
                          + [(legend[1], ("line", "black", "--", 1))])
        ms = [v * 1e3 for v in (n["compute_s"], n["comm_s"] - n["exposed_s"], n["exposed_s"], n.get("host_wait_s", 0))]
        rows = len(PARTS) if offloaded else 3
        if len(self.tim.get_yticks()) != rows:  # the host's row appears or goes
            self._time_ticks(rows)
        for y, (bar, label, v) in enumerate(zip(self.time_bars, self.time_labels, ms)):
            bar.set_width(v)
            bar.set_visible(y < rows)
            bar.set_gid(f"time:{PARTS[y]}" if y < rows else None)
            label.set_text(f"{v:.1f} ms" if y < rows else "")
            label.xy = (v, y)
        self.tim.set_xlim(0, nice_ceiling(max(ms) * 1.3) if max(ms) > 0 else 1)
        self.tim.set_title(f"step {n['step_s'] * 1e3:.1f} ms on {n['device']}, {n['link']}", fontsize=self.fontsize + 1)
        return self.figure

    def forget_backgrounds(self) -> None:
        """Drop the rasterised backgrounds: the next `png()` draws everything (benchmarks/explorer.py's cold case)."""
        self._backgrounds.clear()

    def _moving(self) -> list:
        """The artists a setting changes without changing the axes' scale or legend, in the order a full draw paints
        them (by zorder: bars, capacity line, spines over the bars' edges, then text), drawn over the background."""
        segments = [b for pair in self.bars.values() for b in pair]
        spines = [sp for ax in (self.mem, self.tim) for sp in ax.spines.values() if sp.get_visible()]
        artists = (segments + self.time_bars + [self.capacity] + spines + self.totals + self.time_labels
                   + [self.mem.title, self.tim.title])
        return sorted(artists, key=lambda a: a.get_zorder())  # stable: equal zorders keep the order above

    def png(self) -> bytes:
        """The figure as PNG bytes: the background rasterised again only for limits or a legend not seen lately."""
        from matplotlib.text import Text

        canvas, moving = self.figure.canvas, self._moving()
        renderer = canvas.get_renderer()
        if self.text_raster and getattr(renderer, "zerosim_text", None) is None:
            renderer.zerosim_text = TextRaster(renderer)  # texts drawn again at their place: pasted, not rasterised
        key = (self.mem.get_xlim(), self.mem.get_ylim(), self.tim.get_xlim(), self.tim.get_ylim(), self._legend)
        if key in self._backgrounds:
            canvas.restore_region(self._backgrounds[key])
        else:  # the axes, ticks and legend alone, kept for the redraws that come back to them
            texts = [a for a in moving if isinstance(a, Text)]
            words, shown = [t.get_text() for t in texts], [a.get_visible() for a in moving]
            for a in moving:
                a.set_visible(False)
            for t in texts:  # emptied, not hidden: a full draw places the titles only while they are visible
                t.set_text("")
                t.set_visible(True)
            canvas.draw()
            if len(self._backgrounds) >= BACKGROUNDS:
                del self._backgrounds[next(iter(self._backgrounds))]  # the oldest
            self._backgrounds[key] = canvas.copy_from_bbox(self.figure.bbox)
            for a, v in zip(moving, shown):
                a.set_visible(v)
            for t, w in zip(texts, words):
                t.set_text(w)
        for a in moving:
            if a.get_visible():
                a.axes.draw_artist(a)
        return png_bytes(np.asarray(canvas.buffer_rgba()))  # unfiltered, zlib level 1 (_png.py)
