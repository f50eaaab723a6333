"""`zerosim timeline`'s words: one step, the stages' sweep and the strategies' sweep, from their reports' `to_dict()`
(zerosim.analysis.reports: StepReport, SweepReport, StrategySweepReport)."""

from __future__ import annotations

from zerosim.analysis.costs import GB
from zerosim.analysis.reports import verdict_word
from zerosim.cli.offload_args import offload_timeline_lines
from zerosim.cli.pipeline_format import pp_step_lines
from zerosim.prose import WIDTH, wrap


def format_one(r: dict) -> str:
    pct = lambda x: f"{100 * x / r['step_s']:.0f} %" if r["step_s"] else "-"  # noqa: E731
    unit = lambda s: f"{s * 1e3:10.2f} ms" if s < 1 else f"{s:10.3f} s "  # noqa: E731
    overlaid = sum(v["seconds"] for v in r["by_purpose"].values()) - r["comm_s"]  # calls on streams at once
    mb, k = r["micro_batch"], r["accumulation_steps"]
    tp, pp = r.get("tensor_parallel"), r.get("pipeline_parallel")
    each = ("micro-batch", "micro-batches", "data-parallel rank") if pp is not None else ("micro-step", "micro-steps",
                                                                                          "rank")
    work = (
        f"{r['tokens_per_rank']:,} tokens per rank"
        if mb is None
        else f"{mb['batch']} × {mb['seq_len']:,} tokens × {k} {each[k != 1]} per {each[2]}, "
        f"checkpoint {r['checkpoint']!r}"
    )
    what = f"ZeRO-{r['stage']}" if r["strategy"] is None else f"{r['strategy']}" + (
        f" (group of {r['shard_group']})" if r["shard_group"] else "")
    nodes = "" if r["gpus_per_node"] is None else f" on nodes of {r['gpus_per_node']}"
    cp = r.get("context_parallel")
    degrees = [f"{name} {d[name]}" for name, d in (("pp", pp), ("tp", tp), ("cp", cp)) if d is not None]
    if degrees:  # every degree once, the data-parallel one what they leave (the outermost's report counts it)
        nodes += " = " + " x ".join(degrees) + f" x dp {next(d for d in (pp, cp, tp) if d is not None)['dp']}"
    if cp is not None:
        nodes += f" ({cp['style']}, {cp['split']} split)"
    if tp is not None:
        nodes += (", sequence parallel" if tp["sp"] else "") + (
            f", {tp['layout']}'s activation layout" if "layout" in tp else "") + (
            ", async TP (no compute waits for TP's collectives: a bound)" if tp["async"] else "")
    if cp is not None:
        work += (f"; each rank {cp['tokens_per_rank']:,} tokens of a sequence, " + (
            "every CP position the same attention pairs" if cp["balanced"] else
            f"rank 0 computing CP position {cp['rank0_position']}'s blocks (the busiest: every send waits for it)"))
    links = (f"  {r['device']} over {r['link']} ({r['link_note']})" if r["inter_link"] is None else
             f"  {r['device']}; within a node {r['link']}, across nodes {r['inter_link']}")
    lines = [
        *wrap(f"zerosim timeline: {r['model']} (Ψ = {r['params']:,}, {r['units']} units), N = {r['ranks']:,} "
              f"ranks{nodes}, {what}, {r['precision']}", "  "),
        *wrap(f"  {work}", "    "),
        *wrap(links, "    "),
        f"  schedule: {r['comm']}" + ("" if r["overlap"] else "; no overlap: one stream per rank"),
        "",
        f"step time        {unit(r['step_s'])}",
        f"  compute        {unit(r['compute_s'])}  ({pct(r['compute_s'])} of the step: rank 0's compute stream)",
        f"  communication  {unit(r['comm_s'])}  ("
        + ("the communication stream" if overlaid < 1e-9 else "the time some stream was busy, streams at once "
           "counted once") + ", the same on every rank)",
        f"    hidden       {unit(r['overlapped_s'])}  (ran while compute ran)",
        f"    exposed      {unit(r['exposed_comm_s'])}  ({pct(r['exposed_comm_s'])} of the step: "
        "compute waited for it)",
        "",
        "communication by purpose (exposed: compute waited for it):",
    ]
    why = r.get("exposure", {})
    for purpose, v in r["by_purpose"].items():
        lines.append(f"  {purpose:15s} {v['calls']:6,d} calls  {unit(v['seconds'])}  exposed {unit(v['exposed'])}")
        lines += [f"      {line}" for line in wrap(why.get(purpose, ""), width=100)]
    if overlaid >= 1e-9:  # the rows' sum is not the headline's: say why, rather than leave a sum that does not add up
        lines += [f"  {line}" for line in wrap(
            f"(the rows add to {unit(r['comm_s'] + overlaid).strip()}: {unit(overlaid).strip()} of calls on different "
            "streams ran at once, counted once above; each row's exposed time is its own calls')", width=100)]
    if r["inter_link"] is not None:
        lines += ["", "communication by link tier (each tier its own stream; bytes: one rank's, the ranks' average):"]
        for tier, v in r["tiers"].items():
            sent = f"{v['bytes_per_rank'] / GB:10.2f} GB sent"
            lines.append(f"  {tier:11s} {v['link']:15s} {v['calls']:6,d} calls  {unit(v['seconds'])}  {sent}")
    lines += offload_timeline_lines(r)  # with offload: the host's streams and what the device waited for
    lines += pp_step_lines(r["pipeline_parallel"]) if r.get("pipeline_parallel") else []
    lines += _memory_lines(r)
    lines += [
        "",
        *wrap(_throughput_line(r), "  "),
        *wrap(f"time from: {r['time_model']}", "  "),
        *wrap(f"links: {r['link_model']}", "  "),
        "(what is left out: contention between streams, NCCL's tree/NVLS algorithms, CPU issue delays:",
        "zerosim.analysis.timeline, simulate; how far such predictions were off on published runs: zerosim validate)",
        "the words (exposed, hidden, phase, prefetch, unit): docs/glossary.md",
    ]
    return "\n".join(line for line in lines if line is not None)


def _throughput_line(r: dict) -> str:
    """Tokens/s per GPU and MFU, the one definition's (analysis/costs/_throughput.py): the job's tokens / step /
    GPUs."""
    if not r["tokens_per_s_per_gpu"]:
        return ""
    tp, cp, pp = r.get("tensor_parallel"), r.get("context_parallel"), r.get("pipeline_parallel")
    shared = "" if tp is None else f"; a TP group's {tp['tp']} GPUs share one batch rank's tokens"
    shared += "" if pp is None else f"; a pipeline's {pp['pp']} stages share one batch rank's micro-batches"
    shared += "" if cp is None else f"; a CP group's {cp['cp']} GPUs share one batch rank's sequences"
    mfu = "" if r["mfu"] is None else f", MFU {100 * r['mfu']:.1f} %"
    return (
        f"throughput: {r['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU{mfu} (the job's tokens / step / GPUs{shared})"
    )


def _memory_lines(r: dict) -> list:
    """The peak (rank 0's; beside a pipeline, the pipeline rank's that peaks highest) and, with a GPU, the verdict."""
    pp = r.get("pipeline_parallel")
    whose = "rank 0's peak" if pp is None else (f"the highest peak, pipeline rank {pp['peak_rank']}'s (GPU "
                                                f"{pp['ranks'][pp['peak_rank']]['gpu']}):")
    lines = [
        "",
        *wrap(f"memory: {whose} {r['peak_gb']:.2f} GB, of which params {r['params_peak_gb']:.2f} GB "
              "(prefetch raises it: gathered units wait in memory)", "  "),
    ]
    if r["fit"] is not None:
        f = r["fit"]
        sum_up = (f"  on one {f['gpu']} ({f['capacity'] / GB:.2f} GB): {f['measured'] / GB:.2f} GB measured + "
                  f"{f['overheads_total'] / GB:.2f} GB estimated ({_estimate_names(f)}) = {f['total'] / GB:.2f} GB:")
        verdict = verdict_word(f)  # whole, on the sum's line where it fits the page's width, else on its own
        lines += [f"{sum_up} {verdict}"] if len(sum_up) + 1 + len(verdict) <= WIDTH else [sum_up, f"    {verdict}"]
    return lines


def _estimate_names(fit: dict) -> str:
    """The estimates' rows in a few words: "CUDA, NCCL, allocator", with DeepSpeed's buckets where counted."""
    short = {"CUDA context": "CUDA", "NCCL buffers": "NCCL", "DeepSpeed gradient buckets": "DeepSpeed's buckets",
             "allocator reserve": "allocator"}
    return ", ".join(short.get(o["name"], o["name"]) for o in fit["overheads"])


def format_sweep(r: dict) -> str:
    lines = [
        f"zerosim timeline --sweep: {r['model']} (Ψ = {r['params']:,}; largest unit {r['largest_unit']:,}), "
        f"{r['device']}, {r['precision']}, {r['tokens_per_rank']:,} tokens per rank",
        f"  schedule: {r['comm']}",
        "",
        f"{'link':8s} {'stage':>5s} "
        + " ".join(f"{n:>9,d}" for n in sorted({x["ranks"] for x in r["rows"]}))
        + "   <- N",
    ]
    for link in ("nvlink4", "ib_ndr"):
        for st in (1, 2, 3):
            row = sorted((x for x in r["rows"] if x["link"] == link and x["stage"] == st), key=lambda x: x["ranks"])
            lines.append(
                f"{link:8s} {st:5d} "
                + " ".join(
                    f"{x['exposed_comm_s'] / x['step_s'] * 100:8.0f}%"
                    if x["fits"]
                    else f"{'✗ ' + format(x['needs'] / 1e9, '.0f') + ' GB':>9s}"
                    for x in row
                )
            )
    lines += [
        "",
        "Each cell: the share of the step that is exposed communication (compute waiting), rank 0;",
        *wrap(f"time from: {r['time_model']} (R = {r['gemm_rate'] / 1e12:.0f} TFLOP/s for the model's GEMMs);", "  "),
        *wrap(f"✗ NNN GB: a rank would need that much (measured peak + estimates) on one {r['gpu']} of "
              f"{r['capacity'] / 1e9:.1f} GB: it does not fit, so no such step could run.", "  "),
        "",
    ]
    for link in ("nvlink4", "ib_ndr"):
        need, n = r["bandwidth_tokens"][link], r["hiding_fails_at"][link]
        if n is None:
            lines += wrap(f"{link}: no N hides ZeRO-3's gathers: bandwidth alone needs {need:,.0f} tokens per rank "
                          f"(R/β), this run has {r['tokens_per_rank']:,}.", "  ")
        else:
            lines += wrap(f"{link}: ZeRO-3's gathers stop hiding past N ≈ {n:,.0f}: 1 + 2Φ(T/R − 1/β)/α with Φ the "
                          "largest unit (zerosim.analysis.planner, sweep).", "  ")
        over = [
            k.split()[-1] + ":" + (f"{v:,}" if v else "none")
            for k, v in r["exposed_over_half"].items()
            if k.startswith(link)
        ]
        lines.append(f"  first N with more than half the step exposed, by stage: {', '.join(over)}")
    return "\n".join(lines)


def format_strategy_sweep(r: dict) -> str:
    """The sweep as a table: step time per (strategy, N), ✗ where a rank's memory does not fit the GPU."""
    ranks = sorted({x["ranks"] for x in r["rows"]})
    names = list(dict.fromkeys(x["strategy"] for x in r["rows"]))
    lines = [
        f"zerosim timeline --sweep: {r['model']} (Ψ = {r['params']:,}), nodes of {r['gpus_per_node']}, "
        f"{r['device']}, {r['precision']}, {r['tokens_per_rank']:,} tokens per rank",
        f"  HSDP's and MiCS's shard group S = {r['shard_group']:,}; hpZ's secondary group S' = {r['hpz_group']:,}",
        "",
        f"{'strategy':18s} " + " ".join(f"{n:>9,d}" for n in ranks) + "   <- N",
    ]
    for name in names:
        cells = {x["ranks"]: x for x in r["rows"] if x["strategy"] == name}
        lines.append(f"{name:18s} " + " ".join(
            f"{cells[n]['step_s']:8.2f}s" if cells[n]["fits"] else f"{'✗ ' + format(cells[n]['peak'] / GB, '.0f'):>9s}"
            for n in ranks))
    lines += ["", "inter-node GB one rank sent per step (the ranks' average):"]
    for name in names:
        cells = {x["ranks"]: x for x in r["rows"] if x["strategy"] == name}
        lines.append(f"{name:18s} " + " ".join(f"{cells[n]['inter_bytes'] / GB:9.1f}" for n in ranks))
    over = ", ".join(f"{k}: {v:,}" if v else f"{k}: none" for k, v in r["exposed_over_compute"].items())
    lines += [
        "",
        "Each cell: rank 0's simulated step time (α-β rings, NVLink within a node, InfiniBand across);",
        *wrap(f"time from: {r['time_model']};", "  "),
        f"✗ NNN: a rank's measured peak (GB) does not fit one {r['gpu']} of {r['capacity'] / GB:.1f} GB with the",
        "runtime estimates. Rings of S ranks (HSDP, MiCS) stop growing with N; FULL_SHARD's and hpZ's forward",
        "gathers span the world (zerosim.analysis.planner, strategy_sweep, derives where each crossover moves).",
        *wrap(f"first N where exposed communication exceeds compute: {over}", "  "),
    ]
    return "\n".join(lines)
