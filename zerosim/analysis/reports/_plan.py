"""The planner's answer as a report: what `zerosim plan` prints (its `--json` is `to_dict()`).

    p = plan(config, 64, 8, "h100-80gb", 4096, 1024)               # analysis/planner
    report = plan_report(p, config, "--model llama-3-70b")
    report.fitting[0]["step_s"], report.fitting[0]["mfu"], report.reproduce

Each row of the planner (a stage × checkpointing strategy × micro-batch it tried) with its memory grouped by kind at the
peak, the allocator's reserve, tokens per second per GPU and MFU (analysis/costs/_throughput.py, the one definition);
the two commands that reproduce the top row.
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.analysis.reports._step import Report, kept, link_model

KINDS = (  # the columns a plan groups a peak's ledger kinds into: (label, what it holds)
    ("W", "params"),
    ("G", "grads"),
    ("OS", "master and optim:*"),
    ("grad32", "grad32"),
    ("activ.", "activations"),
    ("other", "comm, scratch"),
)


def kind_group(kind: str) -> str:
    """The column a ledger kind is counted in."""
    return {"params": "W", "grads": "G", "master": "OS", "grad32": "grad32", "activations": "activ."}.get(
        kind, "OS" if kind.startswith("optim:") else "other"
    )


@dataclass(frozen=True)
class PlanReport(Report):
    """The plan (see the module docstring); `plan` is the planner's Plan it read."""

    settings: dict  # what was asked (the planner's settings, its Hardware left out), and how many rows to show
    link_model: str
    model_flops_per_token: float
    link: str
    fitting: list  # the rows that fit, fastest first
    did_not_fit: list
    pruned: list  # [{"stage", "model_states"(, "tp", "cp" or "offload")}]: stages whose states alone exceed the GPU
    # [{"tp" (, "cp", "pp"): [degrees], "strategies", "why"}]: strategies a combination of degrees cannot run (not
    # tried there; "strategies" [] when the combination itself, or a pipeline's micro-batches, are refused), by reason
    left_out: list
    reproduce: list  # the `zerosim memory` and `zerosim timeline` commands of the top row
    plan: object = kept()


def plan_report(p, config, model_flag: str, extra_flags: str = "", top: int = 10) -> PlanReport:
    """The report of the planner's Plan `p` for `config` (a DecoderConfig); `model_flag` ("--model X" or "--config
    PATH") and `extra_flags` (links, efficiency) complete the reproducing commands; `top`: rows a reader sees."""
    from zerosim.analysis.costs import model_flops_per_token

    s = p.settings
    rate = _peak_rate(s["device"], s["precision"])
    per_token = model_flops_per_token(config, s["seq_len"])
    reproduce = []
    if p.fitting:
        memory, timeline = p.commands(p.fitting[0], model_flag)
        reproduce = [memory, timeline + (f" {extra_flags}" if extra_flags else "")]
    return PlanReport(
        settings={**{k: v for k, v in s.items() if k != "hardware"}, "top": top},
        link_model=link_model(s["hardware"]), model_flops_per_token=per_token, link=p.link,
        fitting=[_row(r, s, rate, config) for r in p.fitting],
        did_not_fit=[_row(r, s, rate, config) for r in p.rows if not r.fits],
        pruned=[{"stage": x[0], "model_states": x[1], **(x[2] if len(x) > 2 else {})} for x in p.pruned]
        + [{"stage": st, "model_states": b, "offload": o} for st, b, o in p.pruned_offload],
        left_out=_left_out(p.left_out), reproduce=reproduce, plan=p,
    )


def _left_out(rows: tuple) -> list:
    """The planner's (({degree: value}, strategy or None, why), ...) grouped: one entry per reason with the degrees
    it was left out at (a list per degree that the plan varied: "tp", and "cp" where context parallelism was tried)
    and its strategies ([] where the combination itself was refused)."""
    varied = [d for d in ("tp", "cp", "pp") if any(degrees.get(d, 1) > 1 for degrees, _, _ in rows)] or ["tp"]
    varied += ["pp_schedule"] if any("pp_schedule" in degrees for degrees, _, _ in rows) else []
    by = {}
    for degrees, name, why in rows:
        entry = by.setdefault(why, {**{d: [] for d in varied}, "strategies": []})
        for d in varied:
            value = degrees.get(d, 1 if d != "pp_schedule" else None)
            entry[d] += [] if value in entry[d] or value is None else [value]
        entry["strategies"] += [] if name is None or name in entry["strategies"] else [name]
    return [{**v, "why": why} for why, v in by.items()]


def _peak_rate(device: str, precision: str) -> float:
    from zerosim.analysis.timeline import DEVICES
    from zerosim.precision import get_precision

    return DEVICES[device].rate(get_precision(precision).compute)


def _row(r, s, rate, config) -> dict:
    from zerosim.analysis.costs import mfu, reserved, tokens_per_s_per_gpu
    from zerosim.parallel import ParallelDims

    by = {label: 0 for label, _ in KINDS}
    for kind, nbytes in r.at_peak.items():
        by[kind_group(kind)] += nbytes
    out = {
        **({"tp": r.tp} if tuple(s.get("tps", (1,))) != (1,) else {}),  # tensor parallelism's degree, when tried
        **({"cp": r.cp} if "cps" in s else {}),  # context parallelism's, when tried
        **({"pp": r.pp, "pp_schedule": r.pp_schedule, "virtual_stages": r.virtual_stages} if "pps" in s else {}),
        "stage": r.stage, "strategy": r.strategy, "micro_batch": r.micro_batch, "accumulation": r.accumulation,
        "peak": r.peak, "at_peak": r.at_peak, "by_group": by, "overheads": r.overheads, "total": r.total,
        "capacity": r.capacity, "margin": r.margin, "fits": r.fits, "step_s": r.step_s, "compute_s": r.compute_s,
        "exposed_s": r.exposed_s,
    }
    out["reserved"] = reserved(r.peak, s["reserve"])  # what the caching allocator would hold (costs/_reserve.py)
    if "offloads" in s:  # offload tried: where each row keeps what, on the host and NVMe too
        out |= {"offload": r.offload, "host_peak": r.host_peak, "nvme_peak": r.nvme_peak, "host_fits": r.host_fits}
    if r.step_s:  # the one definition (costs/_throughput.py): a batch rank's B·K sequences, shared by its TP, CP and
        # pipeline groups
        tps = tokens_per_s_per_gpu(ParallelDims(s["ranks"], tp=r.tp, cp=r.cp, pp=r.pp),
                                   r.micro_batch * r.accumulation * s["seq_len"], r.step_s)
        out["tokens_per_s_per_gpu"], out["mfu"] = tps, mfu(tps, config, s["seq_len"], rate)
    return out
