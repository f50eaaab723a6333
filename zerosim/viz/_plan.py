"""The planner's answer, drawn: each configuration's per-GPU memory by kind against the GPU, and its step time.

Reads a `zerosim.analysis.planner._plan.Plan` (ledgers and simulated steps), never a formula. One colour per memory kind
(_palette.py), the labelled estimates hatched grey beside the measured bars, the GPU's capacity a vertical line;
the configurations that do not fit are drawn past it and get no time (they could not run).
"""

from __future__ import annotations

from zerosim.viz._palette import kind_colour, kind_label, kind_order

ESTIMATE = "#bdbdbd"  # the labelled estimates (CUDA, NCCL, allocator): grey and hatched, never a ledger kind's colour


def plan_figure(plan, top: int = 10):
    """Two panels sharing one row per configuration (fastest that fit first, then those that do not): memory
    stacked by kind with the estimates and the capacity; the simulated step time. Returns the Figure."""
    import matplotlib.pyplot as plt

    fits = list(plan.fitting[:top])
    misses = sorted((r for r in plan.rows if not r.fits), key=lambda r: r.total)[: max(2, top - len(fits))]
    rows = fits + misses
    height = 2.0 + 0.38 * len(rows)
    fig, (mem, time) = plt.subplots(1, 2, figsize=(12, height), sharey=True, gridspec_kw={"width_ratios": [3, 2]})
    labels = [f"ZeRO-{r.stage} {r.strategy}, B {r.micro_batch} × K {r.accumulation}" for r in rows]
    y = list(range(len(rows)))[::-1]  # the fastest at the top
    _memory_panel(mem, plan, rows, y, labels)
    _legend(fig, mem)
    _time_panel(time, plan, rows, fits, y)
    s = plan.settings
    fig.suptitle(
        f"{s['model']} on {s['ranks']} × {s['gpu_name']}: {s['global_batch']:,} sequences of {s['seq_len']:,} "
        f"tokens per step, {s['precision']}",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.45 / height, 1, 1))  # room for the legend below
    return fig


def _memory_panel(mem, plan, rows, y, labels) -> None:
    """Each row's per-GPU memory stacked by kind, the estimates hatched beside it, and the GPU's capacity a line."""
    GB = 1e9
    kinds = kind_order({k for r in rows for k in r.at_peak})
    estimates = ("estimates (CUDA, NCCL, DeepSpeed's buckets, allocator)" if plan.settings.get("buckets")
                 else "estimates (CUDA, NCCL, allocator)")
    for yi, r in zip(y, rows):
        left = 0.0
        for k in kinds:
            w = r.at_peak.get(k, 0) / GB
            if w:
                mem.barh(
                    yi,
                    w,
                    left=left,
                    color=kind_colour(k),
                    gid=f"kind:{k}",
                    height=0.7,
                    label=kind_label(k)
                    if yi == y[0] or k not in {b.get_gid()[5:] for b in mem.patches[:-1] if b.get_gid()}
                    else None,
                )
            left += w
        mem.barh(
            yi,
            r.overheads / GB,
            left=left,
            color=ESTIMATE,
            hatch="///",
            edgecolor="white",
            height=0.7,
            label=estimates if yi == y[0] else None,
        )
        if not r.fits:
            mem.text(left + r.overheads / GB, yi, f"  {r.total / GB:.0f} GB: does not fit", va="center", fontsize=8)
    cap = plan.settings["capacity"] / GB
    mem.axvline(cap, color="black", linewidth=1.2)
    mem.set_title(f"memory per GPU; the line: one {plan.settings['gpu_name']}, {cap:.1f} GB", fontsize=9)
    widest = max(r.total for r in rows) / GB
    mem.set_xlim(0, max(cap, widest) * 1.45)  # room for the "does not fit" labels
    mem.set_yticks(y, labels, fontsize=8)
    mem.set_xlabel("per-GPU memory at the step's peak (GB = 1e9 bytes)")


def _legend(fig, mem) -> None:
    """The memory kinds' legend, each name once, below both panels."""
    handles, names = mem.get_legend_handles_labels()
    seen = {}
    for h, n in zip(handles, names):
        if n and n not in seen:
            seen[n] = h
    fig.legend(
        seen.values(), seen.keys(), loc="lower center", ncol=4, fontsize=7, frameon=False, bbox_to_anchor=(0.5, 0.0)
    )  # below both panels: it covers no bar


def _time_panel(time, plan, rows, fits, y) -> None:
    """Each row's simulated step time (none for a row that does not fit), and what the times assume."""
    for yi, r in zip(y, rows):
        if r.step_s is not None:
            time.barh(yi, r.step_s, color="#4c72b0", height=0.7)
            time.text(r.step_s, yi, f" {r.step_s:.1f} s", va="center", fontsize=8)
        else:
            time.text(0, yi, " does not fit: no step", va="center", fontsize=8, color="#7f7f7f")
    slowest = max((r.step_s for r in fits), default=1.0)
    time.set_xlim(0, slowest * 1.3)
    assumed = plan.settings.get("time_flags", "").replace("--efficiency ", "efficiency ").replace("--", "")
    where = f"\n({assumed}: docs/validation.md)" if assumed else ""  # what the times assume
    time.set_xlabel("simulated step time (s), fewer is better" + where)
    time.set_title("one step (B sequences × K micro-steps per GPU)", fontsize=9)
