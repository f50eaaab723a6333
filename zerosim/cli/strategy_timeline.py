"""`zerosim timeline --sweep --strategy ...`: FULL_SHARD, HSDP, MiCS and hpZ over N, on nodes of G, two link tiers.

    zerosim timeline --model gpt3-175b --sweep --gpus-per-node 8 --strategy full_shard,hsdp,mics,hpz

Each cell is one meta step of a strategy at one N (zerosim.analysis.planner (strategy_sweep): each with its framework's
recipe), simulated with NVLink inside a node and InfiniBand across. S (HSDP's and MiCS's shard group) is
--shard-group, or the smallest G·2^k whose 18 bytes a parameter take at most half the GPU; S' (hpZ) is --hpz-group,
or a node.
"""

from __future__ import annotations

from zerosim.analysis.costs import GB


def strategy_sweep_report(args, s, names, ranks, device: str, gpu) -> dict:
    """The sweep as data (what --json prints): one row per (strategy, N), with the verdict against `gpu`."""
    from zerosim.analysis.planner import fitting_shard_group, strategy_sweep
    from zerosim.analysis.planner import strategy_crossover as crossover
    from zerosim.cli.fit_lines import judge
    from zerosim.progress import progress

    g = args.gpus_per_node
    if g is None:
        raise ValueError("--sweep --strategy places the ranks on nodes: give --gpus-per-node G (e.g. 8)")
    if g < 1:
        raise ValueError(f"--gpus-per-node must be at least 1, got {g}")
    bad = [n for n in ranks if n > g and n % g]
    if bad:
        raise ValueError(f"--sweep-ranks {bad[0]} does not fill nodes of --gpus-per-node {g}")
    shard = args.shard_group or fitting_shard_group(s.model.num_params, g, gpu.capacity)
    hpz = args.hpz_group or g
    bar = progress(total=len(names) * len(ranks), desc="strategy sweep", enabled=None if not args.json else False)
    from zerosim.cli.efficiency_args import time_model_from_args

    time_model = time_model_from_args(args)
    rows = strategy_sweep(s.model, ranks, names, g, shard, hpz, device, s.comm, s.precision, args.tokens or 2048,
                          progress=lambda done, total: bar.update(1), time_model=time_model)
    bar.close()
    return {
        "model": s.model.name,
        "params": s.model.num_params,
        "gpus_per_node": g,
        "shard_group": shard,
        "hpz_group": hpz,
        "device": device,
        "gpu": gpu.name,
        "capacity": gpu.capacity,
        "precision": s.precision_name,
        "tokens_per_rank": args.tokens or 2048,
        "time_model": time_model.describe(),
        "rows": [
            {
                "strategy": r.strategy, "ranks": r.ranks, "group": r.group, "step_s": r.step, "compute_s": r.compute,
                "exposed_comm_s": r.exposed, "peak": r.peak, "intra_bytes": r.intra, "inter_bytes": r.inter,
                "fits": judge(r.peak, 3, r.ranks, gpu, s.reserve)["fits"],
            }
            for r in rows
        ],
        "exposed_over_compute": {name: crossover(rows, name) for name in names},
    }


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
        f"time from: {r['time_model']};",
        f"✗ NNN: a rank's measured peak (GB) does not fit one {r['gpu']} of {r['capacity'] / GB:.1f} GB with the",
        "runtime estimates. Rings of S ranks (HSDP, MiCS) stop growing with N; FULL_SHARD's and hpZ's forward",
        "gathers span the world (zerosim.analysis.planner, strategy_sweep, derives where each crossover moves).",
        f"first N where exposed communication exceeds compute: {over}",
    ]
    return "\n".join(lines)
