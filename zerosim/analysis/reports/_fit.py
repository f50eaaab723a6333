"""Fits / does not fit: a rank's measured peak plus the labelled estimates against a GPU, as data (`judge`) and as
lines (`verdict_word`, `fit_lines`), shared by the `memory`, `timeline` and `plan` reports so the three say the same
thing the same way.
"""

from __future__ import annotations

from zerosim.analysis.costs import GB, fit, reserved, runtime_overheads
from zerosim.prose import wrap


def judge(peak: int, stage: int, ranks: int, gpu, reserve: float, buckets=None) -> dict:
    """One rank's verdict: {"stage", "measured", "overheads" [{name, bytes, basis}], "total", "capacity", "margin",
    "fits", ...}. `buckets`: a DeepSpeed config's bucket settings (costs.overheads.DeepSpeedBuckets), or None."""
    rows = runtime_overheads(peak, ranks, stage, buckets, reserve)
    f = fit(peak, gpu, rows)
    return {
        "stage": stage,
        "gpu": f.gpu,
        "capacity": f.capacity,
        "measured": f.measured,
        "reserved": reserved(peak, reserve),  # allocated (the ledger's peak) plus the caching allocator's reserve
        "overheads_total": f.overheads,
        "total": f.total,
        "margin": f.margin,
        "fits": f.fits,
        "fits_measured_only": f.fits_measured_only,
        "overheads": [{"name": o.name, "bytes": o.bytes, "basis": o.basis} for o in rows],
    }


def verdict_word(v: dict) -> str:
    """ "fits, 12.34 GB to spare" or "does not fit: 5.67 GB short" (and when the estimates decide it, that too)."""
    if v["fits"]:
        return f"fits, {v['margin'] / GB:.2f} GB to spare"
    why = " (the measured peak alone would fit: the estimates decide it)" if v["fits_measured_only"] else ""
    return f"does not fit: {-v['margin'] / GB:.2f} GB short{why}"


def fit_lines(verdicts: list, gpu, hint: str = "") -> list:
    """The verdict table below a memory report: one row per stage, then the estimates with their basis."""
    if not verdicts:
        return []
    lines = [
        "",
        f"Will a rank fit on one {gpu.name}? Capacity {gpu.capacity / GB:.2f} GB ({gpu.capacity >> 20:,} MiB as "
        f"its driver reports; datasheet: {gpu.datasheet}).",
        f"{'stage':5s} {'allocated peak':>14s} {'(reserved)':>11s} {'+ estimates':>12s} {'= total':>10s}   verdict",
    ]
    for v in verdicts:
        lines.append(
            f"{v['stage']:<5d} {v['measured'] / GB:14.3f} {v['reserved'] / GB:11.3f} {v['overheads_total'] / GB:12.3f} "
            f"{v['total'] / GB:10.3f}   {verdict_word(v)}"
        )
    lines.append("allocated: the ledger's peak, what the tensors need (torch.cuda.max_memory_allocated); "
                 "reserved: with the caching")
    lines.append("allocator's reserve on top (max_memory_reserved, what torchtitan logs; costs/_reserve.py); "
                 "the estimates include it.")
    lines += ["estimates (not measured; rows of their own, never in the ledgers above), per rank:"]
    for name, size, basis in _estimate_rows(verdicts):
        lines.append(f"  {name:<27s} {size:>16s}   {basis}")
    lines.append("  (sources: zerosim/analysis/costs/_overheads.py; --reserve sets the allocator's share)")
    if not any(v["fits"] for v in verdicts) and hint:
        lines += wrap(hint)
    return lines


def _estimate_rows(verdicts: list) -> list:
    """(name, size, basis) per estimate, in the order the verdicts list them: one row where every stage has the same,
    the allocator's reserve as "varies by stage", and a row per size where stages differ, naming its stages
    (DeepSpeed's buckets: none at stage 0, two buffers at stages 1-2 with overlap_comm, one at stage 3)."""
    groups = {}  # name -> {(bytes, basis): [stages]}
    for v in verdicts:
        for o in v["overheads"]:
            groups.setdefault(o["name"], {}).setdefault((o["bytes"], o["basis"]), []).append(v["stage"])
    fullest = [o["name"] for o in max((v["overheads"] for v in verdicts), key=len)]  # stage 3's: every estimate
    rows = []
    for name, sizes in sorted(groups.items(), key=lambda g: fullest.index(g[0]) if g[0] in fullest else len(fullest)):
        if name == "allocator reserve" and len(verdicts) > 1:
            rows.append((name, "varies by stage", next(iter(sizes))[1]))
            continue
        for (size, basis), stages in sizes.items():
            where = "" if len(stages) == len(verdicts) else \
                f" (stage{'s' if len(stages) > 1 else ''} {', '.join(str(st) for st in stages)})"
            rows.append((name, f"{size / GB:.3f} GB", basis + where))
    return rows
