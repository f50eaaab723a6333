"""`zerosim plan`'s report as text, from the library's PlanReport's `to_dict()` (zerosim.analysis.reports): what was
asked, what was skipped, the rows that fit ranked by step time (or the closest ones), the legend and the two commands
that reproduce the top row."""

from __future__ import annotations

from zerosim.analysis.costs import GB
from zerosim.analysis.reports import KINDS
from zerosim.cli.offload_args import offload_plan_lines
from zerosim.prose import wrap

KERNEL_WORDS = {"eager": "plain PyTorch / HF Transformers", "fused": "fused kernels / torch.compile"}


def format_plan(r: dict) -> str:
    """The plan as a reader sees it: what was asked, what was skipped, the rows that fit (or the closest ones), the
    legend and the two commands that reproduce the top row."""
    lines = _asked(r["settings"], r["link_model"]) + _skipped(r)
    if not r["fitting"]:
        lines += ["Nothing tried fits. Closest:"] + [
            _line(x) for x in sorted(r["did_not_fit"], key=lambda x: x["total"])[:5]
        ]
        lines += [
            "",
            "More GPUs, a shorter --seq-len, or a GPU with more memory; --strategies flash or block keep the least.",
        ]
        return "\n".join(lines)
    s = r["settings"]
    tp = tuple(s.get("tps", (1,))) != (1,)  # a TP column when degrees above 1 were tried
    cp = "cps" in s  # a CP column likewise
    pp = "pps" in s  # and a PP column with its schedule
    lines += _fitting_lines(r, tp, cp, pp) + _legend(r, tp, cp, pp)
    return "\n".join(lines)


def _overlap(s: dict) -> str:
    """--overlap-comm where given (the schedule's own default otherwise)."""
    return "" if s.get("overlap_comm") is None else f" (overlap_comm {'on' if s['overlap_comm'] else 'off'})"


def _asked(s: dict, link_model: str) -> list:
    """What was asked: the model, the GPUs, the batch, the precision, the kernels, where the times come from."""
    across = s["ranks"]
    link = "the rings cross nodes" if across > s["gpus_per_node"] else "one node"
    each = s["global_batch"] / across  # a GPU's share (a TP group's GPUs share theirs: 0.5 each beside TP 2)
    return [
        f"zerosim plan: {s['model']} (Ψ = {s['params']:,}) on {across} × {s['gpu_name']} "
        f"({s['gpus_per_node']} per node; {link})",
        *wrap(f"  {s['global_batch']:,} sequences of {s['seq_len']:,} tokens per step = "
              f"{f'{each:,.0f}' if each.is_integer() else f'{each:.3g}'} per GPU; "
              f"{s['precision']}, {s['optimizer']}, {s['comm']}'s schedule{_overlap(s)}; "
              f"capacity {s['capacity'] / GB:.2f} GB per GPU", "    "),
        *wrap(f"  kernels: {s['kernels']} (activations as {KERNEL_WORDS[s['kernels']]} keeps them); loss: {s['loss']}"
              + (f"; beside TP, {s['tp_layout']}'s activation layout (--tp-layout" + (
                  "; Megatron's own kernels and vocabulary-parallel loss: --kernels and --loss apply to torchtitan's)"
                  if s["tp_layout"] == "megatron" else ")")
                 if s.get("tp_layout") else ""), "    "),
        *wrap(f"  time from: {s['time_model']}", "    "),
        *wrap(f"  links: {link_model}", "    "),
        "",
    ]


def _skipped(r: dict) -> list:
    """What was not tried: stages whose model states alone exceed a GPU, and what TP, CP or PP leave out, each with
    the reason."""
    lines = []
    if r["pruned"]:
        lines.append("Skipped, as the model states alone (no strategy or micro-batch makes them smaller) exceed a GPU:")
        lines += [f"  ZeRO-{p['stage']}" + _beside(p)
                  + (f" with {p['offload']}" if "offload" in p else "")
                  + f": {p['model_states'] / GB:.1f} GB" for p in r["pruned"]]
        lines.append("")
    for x in r["left_out"]:  # strategies TP's or CP's units cannot run, or a combination refused, with the reason
        at = " × ".join(f"{d.upper()} {', '.join(map(str, x[d]))}" for d in ("tp", "cp", "pp") if d in x)
        at += f" ({', '.join(x['pp_schedule'])})" if x.get("pp_schedule") else ""
        lines += [*wrap(f"Left out beside {at}: {', '.join(x['strategies'])} ({x['why']})" if x["strategies"]
                        else f"Left out: {at} ({x['why']})", "  "), ""]
    return lines


def _legend(r: dict, tp: bool, cp: bool, pp: bool) -> list:
    """The columns in words, what MFU counts, and the two commands that measure the top row."""
    top = r["fitting"][0]
    shared = ("TP group's" if tp else "CP group's") + " GPUs share theirs" + (
        "" if tp else ", each its L / CP tokens of every sequence")
    s = r["settings"]
    how = f" ({s['cp_style']}, {s['cp_split']} split)" if cp else ""  # --cp-style, --cp-split
    degrees = (f"TP, CP: the tensor- and context-parallel degrees{how}, the data-parallel degree is GPUs / (TP · CP)."
               if tp and cp else "TP: the tensor-parallel degree, the data-parallel degree is GPUs / TP." if tp
               else f"CP: the context-parallel degree{how}, the data-parallel degree is GPUs / CP.")
    paragraphs = [
        "W, G, OS: params, grads, optimizer states with the fp32 master; grad32: the fp32 gradient of the step (a "
        "shard; the whole at stage 0); activ.: saved for backward (docs/glossary.md).",
        "B × K: micro-batch × accumulation steps per GPU" + (f" (a {shared}); {degrees}" if tp or cp else "."),
        *(["PP: the pipeline's degree and schedule (V: stages a rank); beside it K is the micro-batches a step on each "
           "data-parallel rank, GPUs / (TP · CP · PP) of them; a pipeline's step is simulated with its bubble (past "
           "twice its warm-up, on the line through two shorter steps its repeating schedule draws)."] if pp else []),
        f"MFU: model FLOPs per token ({r['model_flops_per_token']:.3g}: 6·(Ψ − embedding) + 12·layers·H·d_h·L, "
        "torchtitan's and PaLM's) × tokens/s per GPU / the GPU's dense peak; recompute not counted. How far such "
        "predictions were off on published runs: zerosim validate (docs/validation.md).",
    ]
    return [
        "",
        *(line for text in paragraphs for line in wrap(text)),
        "",
        f"The top row, ZeRO-{top['stage']} with '{top['strategy']}' at {top['micro_batch']} × {top['accumulation']}"
        + _beside(top) + ", is what these two commands measure:",
    ] + [f"  {c}" for c in r["reproduce"]]


def _beside(x: dict) -> str:
    """" beside TP 2 × CP 4" for a row (or a pruned stage) run beside parallel degrees above 1; "" otherwise."""
    at = " × ".join(f"{d.upper()} {x[d]}" for d in ("tp", "cp", "pp") if x.get(d, 1) > 1)
    at += f" ({x['pp_schedule']})" if x.get("pp_schedule") else ""
    return f" beside {at}" if at else ""


def _pp_text(x: dict) -> str:
    """A row's PP column: its degree and schedule (and virtual stages), or 1."""
    if x.get("pp", 1) == 1:
        return "1"
    v = f" V{x['virtual_stages']}" if x.get("virtual_stages") else ""
    return f"{x['pp']:<2d} {x['pp_schedule'] + v}"


def _fitting_lines(r: dict, tp: bool, cp: bool = False, pp: bool = False) -> list:
    """The rows that fit, fastest first (the first --top of them), then those tried that did not."""
    s = r["settings"]
    shown = r["fitting"][: s.get("top", 10)]
    width = max([len("PP")] + [len(_pp_text(x)) for x in shown])  # the PP column as wide as its widest row shown
    head = (
        f"{'#':>2s}  " + ("TP " if tp else "") + ("CP " if cp else "") + (f"{'PP':{width}s} " if pp else "")
        + f"{'stage':5s} {'strategy':14s} {'B × K':>7s}  {'step time':>10s} "
        f"{'tok/s/GPU':>10s} {'MFU':>5s}  "
        f"{'peak GB':>8s} {'resv.':>6s} {'+est.':>6s} {'margin':>7s}   " + " ".join(f"{k:>6s}" for k, _ in KINDS)
        + ("   offload" if "offloads" in s else "")
    )
    lines = [
        *wrap("Fits, fastest first (per GPU; GB = 1e9 bytes; peak = allocated, the ledger's; resv. = reserved, with "
              "the allocator's reserve; +est. = CUDA context, NCCL"
              + (", DeepSpeed's gradient buckets" if s.get("buckets") else "")
              + " and the allocator's reserve over the peak):"),
        head,
    ]
    for i, x in enumerate(shown, 1):
        lines.append(
            f"{i:>2d}  " + (f"{x.get('tp', 1):<2d} " if tp else "") + (f"{x.get('cp', 1):<2d} " if cp else "")
            + (f"{_pp_text(x):{width}s} " if pp else "")
            + f"{x['stage']:<5d} {x['strategy']:14s} "
            f"{x['micro_batch']:>3d} × {x['accumulation']:<3d} "
            f"{x['step_s']:9.2f}s {x['tokens_per_s_per_gpu']:10,.0f} {100 * x['mfu']:4.0f}%  "
            f"{x['peak'] / GB:8.2f} {x['reserved'] / GB:6.2f} {x['overheads'] / GB:6.2f} {x['margin'] / GB:7.2f}   "
            + " ".join(f"{x['by_group'][k] / GB:6.2f}" for k, _ in KINDS)
            + (f"   {x['offload']}" if "offload" in x else "")
        )
    lines += offload_plan_lines(r, s.get("top", 10))  # with offload: the host and NVMe bytes of its rows
    more = len(r["fitting"]) - s.get("top", 10)
    if more > 0:
        lines.append(f"    ... {more} more that fit (--top, or --json for all)")
    if r["did_not_fit"]:
        lines += ["", "Tried and did not fit (each strategy stops at its first micro-batch that does not):"]
        width = max(len(_who(x)) for x in r["did_not_fit"])  # one column, with or without degrees beside
        lines += [_line(x, width) for x in r["did_not_fit"]]
    return lines


def _who(x: dict) -> str:
    """A configuration that did not fit by name: its stage, the degrees beside it, its strategy."""
    return (f"ZeRO-{x['stage']}" + "".join(f" {d.upper()} {x[d]}" for d in ("tp", "cp", "pp") if x.get(d, 1) > 1)
            + (f" ({x['pp_schedule']})" if x.get("pp_schedule") else "") + f" {x['strategy']}")


def _line(x: dict, width: int) -> str:
    if not x.get("host_fits", True):  # offload: the device fits, a node's host DRAM or NVMe does not
        return (f"  {_who(x):{width}s} B = {x['micro_batch']:<3d} with {x['offload']}: a node's "
                f"host or NVMe is too small (host {x['host_peak'] / GB:.1f} GB, NVMe {x['nvme_peak'] / GB:.1f} GB "
                "per rank)")
    return (
        f"  {_who(x):{width}s} B = "
        f"{x['micro_batch']:<3d}" + (f" with {x['offload']}" if x.get("offload", "none") != "none" else "")
        + f" needs {x['total'] / GB:7.1f} GB "
        f"({x['peak'] / GB:.1f} measured, of which activations {x['by_group']['activ.'] / GB:.1f}): "
        f"{-x['margin'] / GB:.2f} GB short"
    )
