"""`zerosim memory --strategy ...`: per-rank memory and bytes per link tier of the strategies for many nodes.

    zerosim memory --model gpt3-175b --ranks 4096 --gpus-per-node 8 --strategy all --shard-group 64

Each strategy runs one step on the meta backend (one representative rank: every rank of these strategies holds
the same); its row is what the ledgers and the trace recorded, beside the hand formula of its model states:
(2 + g + 4 + K)·Ψ / shards, shards = S for HSDP and MiCS (each shard held by R = N/S replicas), N for the others,
g the bytes the recipe keeps a gradient in (FSDP2: the fp32 parameter's dtype); hpZ and FSDP2's reshard to a
group also hold a secondary piece of 2Ψ/S' at the end of forward (S' = --hpz-group, default a node).
"""

from __future__ import annotations

from dataclasses import replace

from zerosim.analysis.costs import GB


def strategy_rows(args, s, names, tp: int = 1, sp: bool = False) -> list:
    """One measured row per strategy (JSON-ready), with the formula and the bytes each tier carried per rank; beside
    tensor parallelism of degree `tp` the formula reads one TP rank's slice over its N / tp data-parallel ranks."""
    from zerosim.analysis.costs import MemoryConfig, measure_stage, model_state_memory
    from zerosim.cli.strategy_args import check_nodes, group_size, strategy_precision
    from zerosim.parallel.data import STRATEGIES

    gpus, P, N = check_nodes(args.ranks, args.gpus_per_node), s.model.num_params, args.ranks
    rows = []
    for name in names:
        plan, size = STRATEGIES[name], group_size(name, args, gpus)
        if tp > 1 and size == gpus and args.shard_group is None and args.hpz_group is None:
            size = gpus // tp  # a node's data-parallel ranks: TP fills the rest of it
        row, cluster, engine = measure_stage(s.model, N, name, s.optimizer, strategy_precision(name, s.precision),
                                             not args.no_step, s.micro, s.comm, s.clip_grad, gpus_per_node=gpus,
                                             shard_group=size, tp=tp, sp=sp)
        P = engine.model.num_params  # the model's, or one TP rank's slice
        shards = size if plan.sharded_over != "world" else N // tp
        grads = engine.cluster.ranks[0].grads.array.dtype.itemsize  # the recipe's: FSDP2 keeps fp32 gradients
        config = replace(MemoryConfig.for_precision(s.precision_name, optimizer=s.optimizer, padding="none"),
                         fp32_grad_accum=grads == 4)
        formula = model_state_memory(P, shards, 3, config)
        secondary = config.param_bytes * P / size if plan.after_forward.startswith("piece") else 0
        ledger = cluster.ranks[0].ledger
        rows.append({
            "strategy": name,
            "group": size,
            "replicas": N // tp // shards,
            "recipe": engine.recipe.reduction,
            "resting": row["resting"],
            "resting_total": sum(row["resting"].values()),
            "formula_total": formula.total,
            "secondary_peak": ledger.peak("secondary"),
            "secondary_formula": secondary,
            "peak": row["peak"],
            "tiers": row["tiers"],
        })
    return rows


def format_strategies(r: dict) -> str:
    """The strategies' table as `zerosim memory` prints it."""
    tp = r.get("tensor_parallel")
    lines = [
        f"zerosim memory: Ψ = {r['params']:,} parameters ({r['model']}), N = {r['ranks']:,} ranks"
        + ("" if r["gpus_per_node"] is None else f" on nodes of {r['gpus_per_node']}")
        + ("" if tp is None else f" = tp {tp['tp']} x dp {tp['dp']}" + (" (sequence parallel)" if tp["sp"] else ""))
        + f", {r['optimizer']}, {r['precision']}",
        *([] if tp is None else ["Beside TP each GPU holds one TP rank's slice: Ψ below is the slice's, the shards "
                                 "and groups count data-parallel ranks."]),
        "Per-rank memory in GB (1e9 bytes) as the meta backend's ledgers recorded one step; 'formula' is (2 + g + 4",
        "+ K)·Ψ/shards, shards = S (HSDP, MiCS) or N; bytes sent per rank in the step, by the link tier they crossed.",
        "",
        f"{'strategy':18s} {'S':>5s} {'R':>5s}  {'states':>8s} {'formula':>8s}  {'2nd':>7s} {'2Ψ/S':>7s}  "
        f"{'peak':>8s}  {'NVLink':>8s} {'IB':>8s}",
    ]
    for row in r["strategies"]:
        group = "-" if row["group"] is None else f"{row['group']:,}"
        lines.append(
            f"{row['strategy']:18s} {group:>5s} {row['replicas']:5,d}  {row['resting_total'] / GB:8.2f} "
            f"{row['formula_total'] / GB:8.2f}  {row['secondary_peak'] / GB:7.2f} {row['secondary_formula'] / GB:7.2f}"
            f"  {row['peak'] / GB:8.2f}  {row['tiers']['intra-node'] / GB:8.1f} {row['tiers']['inter-node'] / GB:8.1f}"
        )
    lines += [
        "",
        "states: params, grads, master and optimizer state at rest (every rank holds the same); 2nd: the secondary",
        "piece's peak (hpZ keeps it until the step, FSDP2's reshard_after_forward=S until each unit's backward);",
        "peak: the most one rank held at once. NVLink / IB: GB one rank sent (the ranks' average) within nodes and",
        "across them. Each strategy follows its framework's recipe and partitions; docs/recipes.md cites the code.",
    ]
    return "\n".join(lines)
