"""One offloaded step on its five rows: the device's compute and its collectives, the PCIe link, the host's CPU and the
NVMe drives — where the CPU optimizer step sits and what the device waits for.

Reads `zerosim.analysis.timeline.Timeline`s (the simulated times of a recorded step: offload's copies on their "pcie"
and "nvme" streams, the CPU optimizer on its "cpu" lane), never a formula. Each panel is one step, the last of its log
(`step_window`: with DPU the second step is the steady state); its x axis starts at the step's start. The compute row
hatches where the device computed nothing: what the step waited for. Copies take a colour per direction, so the
gradients going down and the parameters coming back read apart.
"""

from __future__ import annotations

from zerosim.viz._timeline import COLOURS, _unit

ROWS = (("compute", "device: compute"), ("comm", "device: collectives"), ("pcie", "PCIe (device <-> host)"),
        ("cpu", "host: CPU optimizer"), ("nvme", "NVMe (host <-> drives)"))
COPIES = {  # a copy's colour by its direction (cluster/_trace.py TRANSFERS)
    "d2h": "#59a14f",  # gradients to the host: the reduction's green
    "h2d": "#4e79a7",  # parameters to the device: the gathers' blue
    "nvme_read": "#b07aa1",
    "nvme_write": "#ff9da7",
}
CPU = "#9c755f"  # the optimizer step's colour (timeline's "optimizer step")
IDLE = "device computes nothing"


def _colour(iv) -> tuple:
    """(colour, legend label) of one interval."""
    collective = getattr(iv.event, "collective", None)
    if collective in COPIES:
        return COPIES[collective], {"d2h": "copy device -> host (gradients)", "h2d": "copy host -> device (params)",
                                    "nvme_read": "NVMe read", "nvme_write": "NVMe write"}[collective]
    if iv.stream == "cpu":
        return CPU, "CPU optimizer step (DeepSpeedCPUAdam)"
    return COLOURS.get(iv.category, "#7f7f7f"), iv.category


def offload_step_figure(results: dict, rank: int = 0, title: str | None = None):
    """`{panel title: Timeline}` one above the other, each the last step of its log on rows device compute /
    collectives / PCIe / CPU / NVMe of rank `rank`, on one time axis from each step's start; bars carry gid
    "<stream>:<legend label>", the device's idle time gid "idle". Returns the Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from zerosim.analysis.timeline import step_window

    windows = {name: step_window(result, rank=rank) for name, result in results.items()}
    span = max(w.duration for w in windows.values())
    scale, unit = _unit(span)
    fig, axes = plt.subplots(len(results), 1, figsize=(12, 1.9 + 1.9 * len(results)), sharex=True, squeeze=False)
    seen = {}
    for ax, (name, result) in zip(axes[:, 0], results.items()):
        w = windows[name]
        for y, (stream, _) in enumerate(ROWS):
            if stream not in result.streams:
                continue
            bars = {}
            for iv in result.track(rank, stream):
                a, b = max(iv.start, w.start), min(iv.end, w.end)
                if b <= a:
                    continue
                colour, words = _colour(iv)
                bars.setdefault((colour, words), []).append(((a - w.start) / scale, (b - a) / scale))
            for (colour, words), spans in bars.items():
                ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=colour, edgecolor="white", linewidth=0.2,
                               gid=f"{stream}:{words}")
                seen[words] = colour
        idle = _gaps(result, rank, w)
        if idle:
            ax.broken_barh([((a - w.start) / scale, (b - a) / scale) for a, b in idle], (-0.35, 0.7),
                           facecolors="none", edgecolor="#d62728", hatch="////", linewidth=0.6, gid="idle")
            seen[IDLE] = None
        ax.set_yticks(range(len(ROWS)), [words for _, words in ROWS], fontsize=8)
        ax.set_ylim(len(ROWS) - 0.4, -0.6)
        ax.set_xlim(0, span / scale)
        t = lambda x: f"{x / scale:.0f}" if x / scale >= 100 else f"{x / scale:.3g}"  # noqa: E731
        ax.set_title(f"{name}: step {t(w.duration)} {unit}; CPU step {t(w.busy.get('cpu', 0))} {unit}, PCIe busy "
                     f"{t(w.busy.get('pcie', 0))} {unit}, NVMe {t(w.busy.get('nvme', 0))} {unit}; the device computed "
                     f"nothing for {t(w.idle)} {unit}", fontsize=9, loc="left")
    axes[-1, 0].set_xlabel(f"time from the step's start ({unit}), rank {rank}")
    handles = [Patch(facecolor=c, label=words) for words, c in seen.items() if c is not None]
    if IDLE in seen:
        handles.append(Patch(facecolor="none", edgecolor="#d62728", hatch="////", label=IDLE + " (waits)"))
    ncol = min(len(handles), 4)
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    legend = (0.22 * -(-len(handles) // ncol) + 0.1) / fig.get_figheight()  # the legend's rows, in figure height
    fig.tight_layout(rect=(0, legend, 1, 1))
    return fig


def _gaps(result, rank: int, w) -> list:
    """[(start, end)] inside the window when rank `rank`'s compute stream is idle."""
    busy = sorted((max(iv.start, w.start), min(iv.end, w.end)) for iv in result.track(rank, "compute")
                  if iv.end > w.start and iv.start < w.end)
    out, t = [], w.start
    for a, b in busy:
        if a > t:
            out.append((t, a))
        t = max(t, b)
    if t < w.end:
        out.append((t, w.end))
    return [(a, b) for a, b in out if b - a > 1e-12 * max(w.duration, 1.0)]
