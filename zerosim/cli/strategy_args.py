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
    from zerosim.cli.choices import MESH_STRATEGIES

    m = p.add_argument_group("many nodes: ranks on nodes of G GPUs, strategies that shard and replicate over groups")
    m.add_argument(
        "--gpus-per-node",
        type=int,
        default=None,
        metavar="G",
        help="GPUs per node: rings inside a node run over NVLink, rings across nodes over InfiniBand",
    )
    names = ", ".join(MESH_STRATEGIES)  # a strategy some releases lack carries them: "mics (DeepSpeed <= 0.19.6)"
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
    _check_groups_read(args, names)
    return names


def _check_groups_read(args, names: tuple) -> None:
    """Refuse --shard-group or --hpz-group where none of the strategies `names` sizes its group with it (each
    strategy reads one, or none: mesh_of); was: `--strategy hsdp --hpz-group 4` ran and printed the same."""
    from zerosim.parallel.data import STRATEGIES, get_plan

    spelling = flags()

    def reads(name: str) -> str | None:
        plan = get_plan(name)
        return spelling.group(plan) if plan.uses_groups else None

    for flag, value in (("--shard-group", args.shard_group), ("--hpz-group", args.hpz_group)):
        if value is not None and all(reads(n) != flag for n in names):
            users = " or ".join(n for n in STRATEGIES if reads(n) == flag)
            raise ValueError(f"{flag} sizes the group of {users}; --strategy {','.join(names)} names none of them: add "
                             f"one, or drop {flag}")


def each_strategy(args, names, make) -> tuple:
    """([make(name), ...], skipped): with --strategy all, a strategy that does not apply here (its ValueError: a
    group that does not fit these nodes, ...) is skipped, {"strategy", "why"}, and the others run; a strategy named
    by hand is never skipped (its error is the answer). Refused when none applies."""
    if args.strategy != "all":
        return [make(name) for name in names], []
    made, skipped = [], []
    for name in names:
        try:
            made.append(make(name))
        except ValueError as e:
            skipped.append({"strategy": name, "why": str(e)})
    if not made:
        raise ValueError(f"--strategy all: no strategy applies here ({skipped[0]['strategy']}: {skipped[0]['why']})")
    return made, skipped


def skipped_lines(skipped: list) -> list:
    """The lines that say which strategies --strategy all left out, and why."""
    from zerosim.prose import wrap

    return [line for s in skipped for line in wrap(f"skipped {s['strategy']}: {s['why']}", "  ")]


def flags(ranks_flag: str = "--ranks"):
    """How the commands spell what a DataMesh checks (parallel/data/multinode/_data_mesh.py): its errors name the
    flags."""
    from zerosim.parallel.data.multinode import Spelling

    return Spelling(ranks=ranks_flag, nodes="--gpus-per-node", shard_group="--shard-group",
                    secondary_group="--hpz-group", strategy="--strategy {}", give_nodes="--gpus-per-node G", flags=True)


def check_nodes(ranks: int, gpus_per_node: int | None, ranks_flag: str = "--ranks") -> int | None:
    """G for a cluster of `ranks`: --gpus-per-node (None when not given; the ranks themselves when they fit one
    node), checked to fill whole nodes by the library's one rule (multinode.check_nodes). `zerosim plan` checks its
    --gpus here too, so it accepts exactly what the `memory` and `timeline` commands it prints accept."""
    from zerosim.parallel.data.multinode import check_nodes as nodes

    return nodes(ranks, gpus_per_node, flags(ranks_flag))


def mesh_of(args, stage, ranks: int | None = None, ranks_flag: str = "--ranks", tp: int = 1, cp: int = 1,
            pp: int = 1):
    """The DataMesh of `stage` (a ZeRO stage or a strategy's name) on --ranks (or `ranks`) ranks placed
    --gpus-per-node to a node, its group the flag that sizes it (--shard-group for HSDP and MiCS, --hpz-group for hpZ
    and FSDP2's reshard to a group; a flag that sizes another kind of strategy is left out), beside --tp `tp`
    (the default group then a node's data-parallel ranks, G / tp), --cp `cp` and --pp `pp`: checked once, by the
    library, in the flags' words."""
    from zerosim.parallel.data import get_plan
    from zerosim.parallel.data.multinode import DataMesh

    plan, spelling = get_plan(stage), flags(ranks_flag)
    given = {"--shard-group": args.shard_group, "--hpz-group": args.hpz_group}[spelling.group(plan)]
    return DataMesh.of(plan, args.ranks if ranks is None else ranks, args.gpus_per_node,
                       given if plan.uses_groups else None, spelling, tp=tp, cp=cp, pp=pp)


def strategy_recipe(name: str) -> str:
    """The gradient recipe of `name`'s framework (FSDP2's for FULL_SHARD and HSDP, DeepSpeed ZeRO-3's for the rest:
    analysis/planner recipe_of), so a single step and the sweep run each strategy alike."""
    from zerosim.analysis.planner import recipe_of

    return recipe_of(name)
