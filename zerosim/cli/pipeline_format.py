"""`zerosim memory --pp P` and `zerosim timeline --pp P` as text: the header, and each pipeline rank's layers, peaks and
micro-batches in flight (memory), or its compute and idle time beside the bubble's closed form (timeline). The numbers
are the reports' (zerosim.analysis.reports: pipeline_summary, each row's "pipeline"; StepReport.pipeline_parallel)."""

from __future__ import annotations

import textwrap

from zerosim.cli.cells import GB, gb_or_dash, stage3_cause, when_measured
from zerosim.prose import wrap


def pp_header(r: dict, pp: dict, tp: dict | None, cp: dict | None = None) -> list:
    """The lines above `zerosim memory`'s table beside pipeline parallelism (and TP, and CP)."""
    degrees = (f"pp {pp['pp']} x " + (f"tp {tp['tp']} x " if tp else "") + (f"cp {cp['cp']} x " if cp else "")
               + f"dp {pp['dp']}")
    shards = (f"the dp = {pp['dp']} ranks holding them." if cp is None else
              f"the dp × cp = {pp['dp'] * cp['cp']} ranks")
    sequence = [] if cp is None else [f"holding them (torchtitan's \"fsdp\" mesh), each GPU on 1/{cp['cp']} of every "
                                      f"sequence ({cp['style']}, {cp['split']} split)."]
    return [
        f"zerosim memory: Ψ = {r['params']:,} parameters ({r['model']}), N = {r['ranks']} GPUs = {degrees}, "
        f"{r['optimizer']}, {r['precision']}",
        f"A pipeline of {pp['pp']} ranks ({_schedule(pp)}, M = {pp['micro_batches']} micro-batches a step on each "
        f"data-parallel rank; {pp['split']}'s split):",
        "each pipeline rank holds its stages' layers" + (" (one TP rank's slice of them)" if tp else "")
        + f" and ZeRO shards them over {shards}",
        *sequence,
        "Per-rank model states in GB (1e9 bytes) of the pipeline rank that peaks, as the ledgers recorded them "
        f"{when_measured(r)};",
        "'formula' is zerosim.analysis.costs for that rank's parameters over dp, padded as the engines hold them.",
        *([] if not pp.get("left_out") else wrap(
            f"ZeRO-{', ZeRO-'.join(str(st) for st in pp['left_out']['stages'])} left out: "
            f"{pp['left_out']['why']}.", "  ")),
        *(line for row in r["stages"] if row.get("beside_pipeline") for line in wrap(
            f"ZeRO-{row['stage']} runs as {row['beside_pipeline']} beside the pipeline, as its framework runs it there "
            "(parallel/pipeline/_beside.py): gathered once a step, gradients whole until one reduce-scatter.", "  ")),
        "",
    ]


def pp_rank_lines(r: dict) -> list:
    """Each pipeline rank's units, parameters, chunks in flight, and its peak at each ZeRO stage of the table."""
    rows = [row for row in r["stages"] if row.get("pipeline")]
    if not rows:
        return []
    pp = r["pipeline_parallel"]
    lines = [
        "",
        f"Per pipeline rank (one GPU of each stage's block stands for its block; GB = 1e9 bytes; {pp['schedule']}, "
        f"M = {pp['micro_batches']}):",
        f"  {'rank':>4s} {'GPUs':>13s}  {'units':<28s} {'params':>14s} {'in flight':>9s}   "
        + " ".join(f"{'ZeRO-' + str(row['stage']):>8s}" for row in rows) + f" {'activ.':>8s}",
    ]
    for p, first in enumerate(rows[0]["pipeline"]):
        lo, hi = first["gpus"]
        units = f"{first['units'][0]} .. {first['units'][1]}"
        peaks = " ".join(f"{row['pipeline'][p]['peak'] / GB:8.2f}" for row in rows)
        lines.append(f"  {p:>4d} {f'{lo}-{hi - 1}':>13s}  {units:<28s} {first['params']:>14,d} "
                     f"{first['in_flight']:>9d}   {peaks} {first['activations'] / GB:8.2f}")
    lines += [
        "in flight: the most micro-batch chunks whose activations the rank holds at once (GPipe M, 1F1B P − r,",
        "interleaved 2(P − 1 − r) + (V − 1)·m + 1: zerosim/parallel/pipeline/_costs.py), so the first rank peaks "
        "highest;",
        "activ.: its activations' peak.",
    ]
    return lines + _sent_lines(rows)


def _sent_lines(rows: list) -> list:
    """Each pipeline rank's bytes sent in the step at each ZeRO stage, the trace's beside the formula."""
    lines = [
        "",
        "GB each pipeline rank sent in the step (the trace's), beside the formula (zerosim.analysis.reports pp_sent):",
        f"  {'rank':>4s} " + " ".join(f"{'ZeRO-' + str(row['stage']):>8s} {'formula':>8s}" for row in rows),
    ]
    for p in range(len(rows[0]["pipeline"])):
        lines.append(f"  {p:>4d} " + " ".join(f"{gb_or_dash(row['pipeline'][p]['sent'], 8, 2)} "
                                             f"{row['pipeline'][p]['sent_formula'] / GB:8.2f}" for row in rows))
    return lines + [
        "formula: ZeRO's collectives of the rank's parameters over its dp ranks (stage 2's reduce-scatter and stage "
        "3's",
        "gathers each micro-step, the rest once a step), plus TP's over its blocks (the embedding on the first stage,",
        "the head on the last), plus each micro-batch's hidden states on and its gradient back at every stage "
        "boundary",
        "the rank sits at (B·L·d, / T under SP, / C under CP).",
    ] + _stage3_note(rows)


def _stage3_note(rows: list) -> list:
    """Why a pipeline rank's trace differs from the formula at ZeRO-3, where it does (cells.py `stage3_cause`)."""
    off = [x["sent"] - x["sent_formula"] for row in rows if row["stage"] == 3 for x in row["pipeline"]
           if x["sent"] is not None]
    if not any(off):
        return []
    more = any(d > 0 for d in off)
    return textwrap.wrap(f"At ZeRO-3 the trace counts {'more' if more else 'less'}: {stage3_cause(more)}.", 110)


def pp_step_lines(pp: dict) -> list:
    """`zerosim timeline --pp`'s lines: each pipeline rank's compute and idle share of the step, the bubble's closed
    form with equal stages beside them."""
    lines = [
        "",
        f"Pipeline: {pp['pp']} ranks, {_schedule(pp)}, M = {pp['micro_batches']} micro-batches a step on each "
        f"data-parallel rank (dp {pp['dp']}).",
        f"  {'rank':>4s} {'compute s':>10s} {'idle':>7s}",
    ]
    for x in pp["ranks"]:
        lines.append(f"  {x['rank']:>4d} {x['compute_s']:10.3f} {100 * x['idle']:6.1f}%")
    lines += wrap(
        f"idle: the part of the step the rank does not compute (its bubble, and what communication it waits for); the "
        f"closed form with equal stages and free links: {100 * pp['bubble_closed_form']:.1f} % "
        f"({pp['bubble_formula']}, zerosim/parallel/pipeline/_costs.py).")
    return lines


def _schedule(pp: dict) -> str:
    return pp["schedule"] + (f", {pp['virtual_stages']} stages a rank" if pp["virtual_stages"] > 1 else "")
