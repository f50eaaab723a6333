"""The flags `zerosim memory` and `zerosim timeline` share for many nodes: where the ranks sit and which strategy.

    --gpus-per-node G     the ranks fill nodes of G GPUs: rings inside a node run over NVLink, rings that leave one
                          over InfiniBand (two link tiers on the timeline)
    --strategy NAME       a strategy for many nodes (parallel/data/_plan.py STRATEGIES: full_shard, hsdp, hsdp_no_sync,
                          mics, mics_hierarchical (both DeepSpeed <= 0.19.6), hpz, no_reshard, reshard_to_group);
                          `memory` takes several, comma-separated, or "all"
    --shard-group S       HSDP's and MiCS's shard group (default G: a node)
    --hpz-group S'        hpZ's zero_hpz_partition_size, FSDP2's reshard_after_forward=S' (default G: a node)
"""

from __future__ import annotations

MAIN = ("full_shard", "hsdp", "mics", "hpz")  # the four an engineer choosing for a 1000-GPU job compares


def add_mesh_arguments(p, several: bool) -> None:
    """--gpus-per-node, --strategy (one, or with `several` a comma-separated list or "all"), --shard-group."""
    from zerosim.parallel.data import STRATEGIES

    m = p.add_argument_group("many nodes: ranks on nodes of G GPUs, strategies that shard and replicate over groups")
    m.add_argument(
        "--gpus-per-node",
        type=int,
        default=None,
        metavar="G",
        help="GPUs per node: rings inside a node run over NVLink, rings across nodes over InfiniBand",
    )
    # a strategy some releases lack carries them: "mics (DeepSpeed <= 0.19.6)"
    names = ", ".join(f"{n} ({p.release.split(' (')[0]})" if p.release else n for n, p in STRATEGIES.items())
    m.add_argument(
        "--strategy",
        default=None,
        metavar="NAME" + (",..." if several else ""),
        help=f"a strategy for many nodes: {names}" + ("; several comma-separated, or 'all'" if several else ""),
    )
    m.add_argument(
        "--shard-group",
        type=int,
        default=None,
        metavar="S",
        help="HSDP's and MiCS's shard group (default: a node)",
    )
    m.add_argument(
        "--hpz-group",
        type=int,
        default=None,
        metavar="S'",
        help="hpZ's zero_hpz_partition_size and FSDP2's reshard_after_forward=S' (default: a node)",
    )


def strategies_of(args, several: bool) -> tuple:
    """The strategies --strategy names, checked (empty when it names none)."""
    from zerosim.parallel.data import STRATEGIES

    if args.strategy is None:
        for flag, value in (("--shard-group", args.shard_group), ("--hpz-group", args.hpz_group)):
            if value is not None:
                raise ValueError(f"{flag} sizes a strategy's group: add --strategy (e.g. --strategy hsdp)")
        return ()
    names = tuple(STRATEGIES) if several and args.strategy == "all" else tuple(args.strategy.split(","))
    if len(names) > 1 and not several:
        raise ValueError(f"--strategy takes one name here, got {args.strategy!r}")
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategy {unknown[0]!r}; choose from {', '.join(STRATEGIES)}"
                         + (" or 'all'" if several else ""))
    return names


def check_nodes(ranks: int, gpus_per_node: int | None, ranks_flag: str = "--ranks") -> int | None:
    """G for a cluster of `ranks`: --gpus-per-node (None when not given; the ranks themselves when they fit one
    node), checked to fill whole nodes. `zerosim plan` checks its --gpus here too, so it accepts exactly what the
    `memory` and `timeline` commands it prints accept."""
    if gpus_per_node is None:
        return None
    if gpus_per_node < 1:
        raise ValueError(f"--gpus-per-node must be at least 1, got {gpus_per_node}")
    if ranks <= gpus_per_node:
        return ranks  # one node, partly filled: every ring inside it
    if ranks % gpus_per_node:
        fit = ranks - ranks % gpus_per_node
        raise ValueError(f"{ranks_flag} {ranks} does not fill nodes of --gpus-per-node {gpus_per_node}: give a "
                         f"multiple of {gpus_per_node} (e.g. {fit} or {fit + gpus_per_node})")
    return gpus_per_node


def group_size(name: str, args, gpus_per_node: int | None):
    """The group a strategy runs with: None for one that has none; else --shard-group (HSDP, MiCS) or --hpz-group
    (hpZ, FSDP2's reshard to a group), each defaulting to G."""
    from zerosim.parallel.data import STRATEGIES

    plan = STRATEGIES[name]
    if not plan.uses_groups:
        return None
    flag, given = ("--shard-group", args.shard_group) if plan.sharded_over != "world" else ("--hpz-group",
                                                                                             args.hpz_group)
    if given is None and gpus_per_node is None:
        raise ValueError(f"--strategy {name} needs a group: give --gpus-per-node G (the group defaults to a node) or "
                         f"{flag}")
    return given if given is not None else gpus_per_node


def strategy_precision(name: str, precision):
    """`precision` (a preset name or a MixedPrecision) with the recipe of `name`'s framework (FSDP2's for FULL_SHARD
    and HSDP, DeepSpeed ZeRO-3's for the rest: timeline/strategy_sweep.recipe_of), so a single step and the sweep
    run each strategy alike."""
    from zerosim.analysis.planner import recipe_of
    from zerosim.precision import get_precision

    return get_precision(precision).with_(reduction=recipe_of(name))
