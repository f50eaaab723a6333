"""The classic pipeline schedule figure (GPipe's Figure 2, Narayanan et al. 2021's Figure 4, Qi et al. 2023's
Figure 3), drawn from a run: one row per pipeline rank, a box per action coloured by its kind (forward, backward, and
the zero-bubble split's backward-input and backward-weight) with its micro-batch's number, the idle time between them
shaded: the bubble.

Each panel is a real run of a schedule's table (zerosim.parallel.pipeline): an MLP of one Linear per stage on the
numpy backend, P pipeline ranks, M micro-batches, its trace placed in time by the timeline with every stage costing
the same (a forward 1 unit, a backward 2, so a zero-bubble backward-input 1 and backward-weight 1; the links free, so
the bubble is the schedule's alone). The title sets the bubble measured on the run beside its closed form
(parallel/pipeline/_costs.py `bubble_fraction`).
"""

from __future__ import annotations

from fractions import Fraction

T_F, T_B, T_W = 1, 2, 1  # a forward, a backward (its backward-weight part): whole units, so the sums are exact
KIND_COLOURS = {"forward": "#4c72b0", "backward": "#55a868", "backward-input": "#8fc98f",
                "backward-weight": "#8172b3"}
LETTERS = {"forward": "F", "backward": "B", "backward-input": "I", "backward-weight": "W"}
PANELS = (("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2), ("zero-bubble", 2))  # (schedule, V)


class _StageCosts:
    """Every stage's Linear: forward T_F, backward T_B (split: T_B - T_W then T_W), the rest (activations, loss) and
    every call free: the costs a timeline reads (analysis/timeline `simulate(costs=...)`)."""

    def __init__(self, virtual: int):
        self.v = virtual

    def compute(self, ev) -> float:
        if ev.kind == "loss" or not ev.name.startswith("fc"):
            return 0.0
        whole = {"forward": T_F, "backward": T_B, "backward-input": T_B - T_W, "backward-weight": T_W}[ev.kind]
        return float(Fraction(whole, self.v))  # a chunk is 1/V of a rank's stage

    def optimizer(self, *args) -> float:
        return 0.0

    def call_bytes(self, call, sent: float) -> float:
        return 0.0


def measure_schedule(schedule: str, pp: int = 4, micro_batches: int = 8, virtual: int = 1) -> dict:
    """One step of `schedule` on `pp` ranks: each rank's actions in time [(start, end, kind, micro, stage)], the
    span from the first forward to the last backward, each rank's bubble (idle fraction of the span, measured) and
    the closed form's."""
    import numpy as np

    from zerosim.analysis.costs import Link
    from zerosim.analysis.timeline import Hardware, simulate
    from zerosim.cluster import Cluster
    from zerosim.models import MLP, make_regression
    from zerosim.optim import Adam
    from zerosim.parallel.pipeline import PipelineEngine, bubble_fraction

    widths = [4] * (pp * virtual + 1)  # one Linear a stage
    cluster = Cluster(pp)
    engine = PipelineEngine(MLP(widths), cluster, 1, Adam(lr=1e-2), "fp32", pp=pp, schedule=schedule,
                            micro_batches=micro_batches, virtual_stages=virtual)
    engine.step([[make_regression(np.random.default_rng(k), 1, 2, widths)[0] for k in range(micro_batches)]])
    free = Link("free", 1e300, 0.0, "no latency, a bandwidth no send takes time on", 0.0)
    timeline = simulate(cluster.trace, Hardware("h100", free, "fp32"), costs=_StageCosts(virtual))
    rows = []
    for r in range(pp):
        rows.append([(i.start, i.end, i.event.kind, i.event.micro, engine.stage_models[r].stage_ids[
            _chunk_of(engine.stage_models[r], i.event.layer)]) for i in timeline.track(r, "compute")
            if getattr(i.event, "kind", None) in LETTERS and i.event.name.startswith("fc")])
    first = min(a[0] for row in rows for a in row)
    span = max(a[1] for row in rows for a in row) - first
    bubbles = [1 - sum(Fraction(b) - Fraction(a) for a, b, *_ in row) / Fraction(span) for row in rows]
    closed = bubble_fraction(schedule, pp, micro_batches, virtual, virtual * T_F, virtual * T_B,
                             virtual * T_W if schedule == "zero-bubble" else 0)
    return {"schedule": schedule, "pp": pp, "micro_batches": micro_batches, "virtual": virtual, "rows": rows,
            "start": first, "span": span, "bubbles": bubbles, "closed_form": closed}


def _chunk_of(part, layer: int) -> int:
    """The chunk (0..V-1) of rank `part`'s unit `layer` (its index in the rank's model)."""
    at = 0
    for c, (lo, hi) in enumerate(part.chunks):
        at += hi - lo
        if layer < at:
            return c
    return len(part.chunks) - 1


def _paler(colour: str) -> str:
    """`colour` mixed 45 % with white: a rank's second chunk (virtual stage), opaque so the bubble's hatch stays
    behind."""
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + 0.45 * (255 - c)):02x}" for c in rgb)


def schedule_figure(pp: int = 4, micro_batches: int = 8, panels=PANELS):
    """The schedules of `panels` ((name, V), ...) one under another, each measured by `measure_schedule`. Boxes carry
    gid "action:<schedule>:<rank>:<letter><micro>", idle stretches "bubble:<schedule>:<rank>". Returns the Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    runs = [measure_schedule(name, pp, micro_batches, v) for name, v in panels]
    width = max(r["span"] for r in runs)
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 1.05 * pp * len(runs) + 1.4), dpi=110, squeeze=False)
    for ax, run in zip(axes[:, 0], runs):
        name, start = run["schedule"], run["start"]
        for r, row in enumerate(run["rows"]):
            y = pp - 1 - r
            ax.add_patch(Rectangle((0, y + 0.08), run["span"], 0.84, fc="0.88", ec="none", hatch="///",
                                   gid=f"bubble:{name}:{r}"))  # idle wherever no box covers it
            for a, b, kind, micro, stage in row:
                chunk = stage // pp
                colour = KIND_COLOURS[kind] if chunk == 0 else _paler(KIND_COLOURS[kind])
                box = Rectangle((a - start, y + 0.08), b - a, 0.84, fc=colour, ec="white", lw=0.8,
                                gid=f"action:{name}:{r}:{LETTERS[kind]}{micro}")
                ax.add_patch(box)
                ax.text((a + b) / 2 - start, y + 0.5, str(micro), ha="center", va="center", fontsize=7,
                        color="white" if chunk == 0 else "0.15", weight="bold")
        ax.set_xlim(0, width)
        ax.set_ylim(0, pp)
        ax.set_yticks([pp - 1 - r + 0.5 for r in range(pp)], [f"rank {r}" for r in range(pp)], fontsize=8)
        ax.set_xticks(range(0, int(width) + 1, 2 if width <= 40 else 4))
        ax.tick_params(axis="x", labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
        chunks = f", V = {run['virtual']} stages a rank (paler: the second)" if run["virtual"] > 1 else ""
        measured = run["bubbles"][0]
        ax.set_title(f"{name}: P = {pp}, M = {micro_batches}{chunks}: bubble {float(measured):.1%} of the step "
                     f"(closed form {run['closed_form']} = {float(run['closed_form']):.1%})", fontsize=9, loc="left")
    drawn = {kind for run in runs for row in run["rows"] for _, _, kind, _, _ in row}  # the legend names only these
    handles = [Patch(fc=KIND_COLOURS[k], label=f"{LETTERS[k]}: {k}") for k in KIND_COLOURS if k in drawn]
    handles.append(Patch(fc="0.88", hatch="///", label="idle: the bubble"))
    axes[-1, 0].set_xlabel(f"time (a forward takes {T_F} unit, a backward {T_B})", fontsize=8)
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle(f"Pipeline schedules from their tables (torch 2.13's rules), one run each: a forward takes {T_F} "
                 f"unit, a backward {T_B}; the number in a box is its micro-batch", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    return fig
