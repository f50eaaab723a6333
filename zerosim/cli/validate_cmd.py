"""Predicted against measured: zerosim on every published training run it carries, with the error of each.

    zerosim validate                  # the table: conditions, source, measured, predicted, error; then the statistics
    zerosim validate --fit            # refit the framework factors on the calibration points alone, and print them
    zerosim validate --only tt-h100-8-eager,foundry-h100-7b-8 --json
    zerosim validate --jobs auto      # the points on every core: the same table in less wall time

Each point (analysis/costs/_validation_points.py) is a published run — torchtitan's Llama 3 / 3.1 tables on H100,
H200 and A100, llm-foundry's MPT tables on H100 and A100 — with its file and commit. zerosim runs the step at the
run's conditions (model, GPUs and network, micro-batch, accumulation, checkpointing, eager or compiled, fp8) and
prints predicted tokens per second per GPU against the measured ones, and predicted reserved memory against the
measured where the run published it. "calibration" points are the only ones the framework factors were fitted on;
"held-out" ones were never fitted to. docs/validation.md has the table, the statistics and the order things were
decided in.
"""

from __future__ import annotations

import json

from zerosim.cli.jobs_args import add_jobs_argument

ROLE = {"calibration": "calib", "held-out": "held"}
HELP = "predicted vs measured on published runs (torchtitan, llm-foundry): the error of every point"


def add_arguments(p) -> None:
    p.add_argument("--fit", action="store_true",
                   help="refit the framework factors on the calibration points alone and print them beside the "
                        "shipped ones (zerosim/analysis/costs/_calibration.py)")
    p.add_argument("--only", default=None, metavar="KEY,...", help="run these points only (keys as printed)")
    p.add_argument("--json", action="store_true", help="print the rows and the statistics as JSON")
    add_jobs_argument(p, "each predicting a point of the table at a time (--fit runs in this process)")


def _points(only):
    from zerosim.analysis.costs import LONG_CONTEXT, POINTS

    if only is None:
        return POINTS
    keys = [k.strip() for k in only.split(",") if k.strip()]
    known = {p.key: p for p in POINTS + LONG_CONTEXT}  # the long-context 4-D runs by name only (docs/validation.md)
    bad = [k for k in keys if k not in known]
    if bad or not keys:
        raise ValueError(f"--only: unknown point {bad[0] if bad else only!r}; points: {', '.join(known)}")
    return tuple(known[k] for k in keys)


def row_of(r) -> dict:
    p = r.point
    return {
        "key": p.key, "role": p.role, "source": p.source, "model": p.model, "gpu": p.gpu, "gpus": p.gpus,
        "micro_batch": p.micro_batch, "seq_len": p.seq_len, "accumulation": p.accumulation, "strategy": p.strategy,
        "preset": p.preset, "fp8": p.fp8, "fp8_all_gather": p.fp8_all_gather, "links": list(p.links), "note": p.note,
        "tp": p.tp, "sp": p.sp, "async_tp": p.async_tp,
        **({"stage": p.stage, "comm": p.comm, "pp": p.pp, "pp_schedule": p.pp_schedule,
            "virtual_stages": p.virtual_stages, "pp_split": p.pp_split} if p.pp > 1 else {}),
        **({"cp": p.cp, "cp_style": p.cp_style, "cp_split": p.cp_split} if p.cp > 1 else {}),
        "measured_tokens_per_s": r.measured_tokens_per_s, "predicted_tokens_per_s": r.tokens_per_s, "error": r.error,
        "measured_mfu": r.measured_mfu, "predicted_mfu": r.mfu, "step_s": r.step_s, "exposed_s": r.exposed_s,
        "allocated": r.allocated, "reserved": r.reserved, "measured_memory_gib": p.memory_gib,
        "memory_error": r.memory_error,
    }


def format_table(rows: list, stats: dict) -> str:
    from zerosim.analysis.costs import FRAMEWORK

    conditions = lambda x: (  # noqa: E731
        f"{x['model']}, {x['gpus']} × {x['gpu']}, {x['micro_batch']} × {x['seq_len']:,}"
        + (f" × {x['accumulation']}" if x["accumulation"] > 1 else "")
        + f", {x['strategy']}, {x['preset']}" + (", fp8" if x["fp8"] else "")
        + (f", TP {x['tp']}" + (" + SP" if x["sp"] else "") + (", async" if x["async_tp"] else "")
           if x["tp"] > 1 else "")
        + (f", PP {x['pp']} {x['pp_schedule']}" + (f" V {x['virtual_stages']}" if x["virtual_stages"] else "")
           + f", ZeRO-{x['stage']}" if x.get("pp", 1) > 1 else "")
        + (f", CP {x['cp']} {x['cp_style']}" if x.get("cp", 1) > 1 else ""))
    width = max([24] + [len(x["key"]) for x in rows])  # the point column: the longest key shown
    lines = [
        "zerosim validate: predicted against measured tokens per second per GPU (and reserved memory where published)",
        f"framework factors (calibrated): {', '.join(f'{k} {v:.3f}' for k, v in FRAMEWORK.items())}",
        "",
        f"{'role':5s} {'point':{width}s} {'measured':>9s} {'predicted':>9s} {'error':>7s}  {'mem GiB':>7s} "
        f"{'pred.':>6s} {'error':>6s}  conditions",
    ]
    for x in rows:
        mem = ("" if x["measured_memory_gib"] is None else
               f"{x['measured_memory_gib']:7.1f} {x['reserved'] / 2**30:6.1f} {100 * x['memory_error']:+5.0f}%")
        lines.append(
            f"{ROLE[x['role']]:5s} {x['key']:{width}s} {x['measured_tokens_per_s']:9,.0f} "
            f"{x['predicted_tokens_per_s']:9,.0f} {100 * x['error']:+6.1f}%  {mem:22s}  {conditions(x)}")
    lines.append("")
    for role in ("calibration", "held-out"):
        s = stats.get(role)
        if s is None:
            continue
        lines.append(f"{role:11s} {s['points']:2d} points: median |predicted/measured − 1| "
                     f"{100 * s['median_abs_error']:.1f} %, largest {100 * s['max_abs_error']:.1f} %, "
                     f"{s['within_35']} within ±35 % (tokens/s per GPU)")
    if "memory" in stats:
        m = stats["memory"]
        lines.append(f"memory      {m['points']:2d} points: median |error| {100 * m['median_abs_error']:.1f} %, "
                     f"largest {100 * m['max_abs_error']:.1f} % (reserved GiB; nothing in the memory model is fitted)")
    if "trend" in stats:
        t = stats["trend"]
        lines.append(f"trend {t['points'][0]} -> {t['points'][1]}: measured {100 * t['measured']:+.1f} %, "
                     f"predicted {100 * t['predicted']:+.1f} %")
    lines += [
        "",
        "Sources (file at commit, table, row) per point: --json, or analysis/costs/_validation_points.py. Memory is",
        "PyTorch's peak reserved: the ledger's allocated peak plus the allocator's reserve (costs/_reserve.py).",
    ]
    return "\n".join(lines)


def run(args) -> int:
    from zerosim.analysis.costs import FRAMEWORK
    from zerosim.analysis.planner import fit_framework as fit
    from zerosim.analysis.planner import summary, validate
    from zerosim.cli.jobs_args import jobs_from_args
    from zerosim.progress import progress

    points, jobs = _points(args.only), jobs_from_args(args)
    given = [flag for flag, on in (("--only", args.only is not None), ("--jobs", args.jobs != "1")) if on]
    if args.fit and given:  # was: taken and dropped, the same factors printed (a walk adding each flag alone)
        raise ValueError(f"{', '.join(given)}: --fit refits the framework factors on every calibration point, in this "
                         "process (_calibration.py); drop " + ("it" if len(given) == 1 else "them")
                         + ", or drop --fit to predict the points")
    if args.fit:
        factors = fit()
        out = {"fitted": factors, "shipped": FRAMEWORK}
        print(json.dumps(out, indent=1) if args.json else "\n".join(
            f"{k}: fitted {v:.5f}, shipped {FRAMEWORK[k]:.3f}" for k, v in factors.items()))
        return 0
    bar = progress(desc="validating", total=len(points), enabled=None if not args.json else False, unit="point")
    predictions = validate(points, jobs=jobs, progress=lambda point: bar.update(1))
    bar.close()
    rows, stats = [row_of(r) for r in predictions], summary(predictions)
    print(json.dumps({"rows": rows, "statistics": stats}, indent=1) if args.json else format_table(rows, stats))
    return 0
