"""FULL_SHARD against HSDP, MiCS and hpZ at scale: one meta step per (strategy, N), on nodes of G GPUs, two link tiers.

Letters: N ranks on nodes of G, S the shard group (HSDP, MiCS), S' hpZ's partition (a node), Φ a unit's parameters,
T tokens per rank per micro-step, R_dev the device's dense 16-bit rate, α and β a link's latency per ring step and
bandwidth per direction.

Every row is a real engine's step on the meta backend (one representative rank, parallel/data/_plan.py's strategy and
its framework's recipe), simulated with NVLink inside a node and InfiniBand across (analysis/timeline/_simulate.py).
Where exposed communication overtakes compute — seed 003's latency argument, `sweep.latency_bound_ranks`: a unit's
gather over a ring of n ranks costs (n−1)·α + 2Φ/β·(n−1)/n against its forward's 2ΦT/R_dev — moves with the
length of the rings each strategy runs:

    FULL_SHARD, hpZ   forward gathers over the world's ring: n = N across N/G nodes, a call's latency NCCL's
                      base + (N − N/G)·α_nv + (N/G − 1)·α_ib (zerosim.analysis.costs._links), so the crossover is where
                      that reaches the forward's slack 2ΦT/R_dev − 2Φ/min(β_nv, G·β_ib) (hpZ only moves
                      backward's gathers into a node)
    HSDP, MiCS        gathers and reduce-scatters over the shard group's ring: n = S, whatever N is; what grows
                      with N is the replicas' all-reduce of a 2Φ/S piece over R = N/S ranks, once per unit per
                      micro-step (HSDP, on a stream of its own) or per step (MiCS):
                      2(R−1)·α_ib + 2·(R−1)/R·(2Φ/S)/β_ib against backward's 4ΦT/R_dev, so
                      N* = S·(1 + (4ΦT/R_dev − 4Φ/(S·β_ib)) / (2α_ib)) when S ≤ G (the shard group's rings on
                      NVLink): further out, its piece being 1/S of the bytes (GPT-3 175B, S = 8, T = 20,480 on
                      H100s at their peak rate: ≈ 37,698 against FULL_SHARD's ≈ 13,960; tests/test_strategy_sweep.py).
                      With S > G the shard group's rings leave the node too and share InfiniBand's stream.

`crossover` finds the first N of a sweep where exposed communication exceeds compute; `hsdp_bound_ranks` gives
the formula's N* for HSDP.
"""

from __future__ import annotations

from dataclasses import field

from zerosim._dataclass import dataclass
from zerosim.analysis.costs import TOKENS
from zerosim.analysis.planner._sweep import meta_step
from zerosim.analysis.timeline import Hardware

STRATEGIES = ("full_shard", "hsdp", "mics", "hpz")  # the four compared
RANKS = (64, 128, 256, 512, 1024, 2048, 4096)
STATE_BYTES = 18  # per parameter with FSDP2's and DeepSpeed's recipes here: 2 params + 4 fp32 grads + 12 (Adam)


@dataclass(frozen=True)
class StrategyRow:
    """One strategy at one N: rank 0's step, seconds; its peak and bytes sent per tier, bytes."""

    strategy: str
    ranks: int
    group: int | None  # S (HSDP, MiCS), S' (hpZ), None (FULL_SHARD)
    step: float
    compute: float
    exposed: float
    peak: int
    intra: float  # bytes one rank sent within nodes (the ranks' average)
    inter: float  # ... across nodes
    states: dict = field(default_factory=dict)  # rank 0's resting model states by ledger kind, bytes
    secondary: int = 0  # the peak of rank 0's secondary pieces (hpZ, FSDP2's reshard to a group), bytes
    busy: dict = field(default_factory=dict)  # {tier: seconds its calls ran on rank 0's stream of that tier}

    @property
    def exposed_fraction(self) -> float:
        return self.exposed / self.step if self.step else 0.0


def fitting_shard_group(params: int, gpus_per_node: int, capacity: float = 80e9, share: float = 0.5) -> int:
    """The smallest S = G·2^k whose model states (18 bytes a parameter over S) take at most `share` of `capacity`:
    the shard group an engineer would give HSDP or MiCS (half the GPU left for activations and buffers)."""
    s = gpus_per_node
    while STATE_BYTES * params / s > share * capacity:
        s *= 2
    return s


def recipe_of(strategy: str) -> str:
    """Each strategy with its framework's recipe, read from its plan (`Plan.framework`): FSDP2's for FULL_SHARD (no
    framework of its own: FSDP2's default), HSDP and FSDP2's resharding (no_reshard, reshard_to_group), DeepSpeed
    ZeRO-3's for MiCS and hpZ; the plan's own `recipe` where its framework's is not modelled beside it
    (no_reshard_no_sync: zerosim's flat one)."""
    from zerosim.parallel.data import STRATEGIES
    from zerosim.parallel.data.multinode import FRAMEWORK_RECIPES

    plan = STRATEGIES[strategy]
    return plan.recipe or FRAMEWORK_RECIPES[plan.framework or "fsdp2"]


def strategy_timeline(model, ranks: int, strategy: str, gpus_per_node: int, group: int | None, device: str = "h100",
                      comm=None, precision: str = "fp16-mixed", tokens: int = TOKENS, time_model=None) -> tuple:
    """(Timeline, engine, Hardware, S): one meta step of `strategy` on the device's NVLink within nodes of
    `gpus_per_node` and InfiniBand across (when there is more than one node), with its framework's recipe;
    `time_model`: what a compute costs (kernel_time.TimeModel; None: the datasheet roofline)."""
    from zerosim.parallel.data import STRATEGIES
    from zerosim.parallel.data.multinode import DataMesh
    from zerosim.precision import get_precision

    hw = Hardware(device, None, get_precision(precision).compute,  # the device's own NVLink within a node
                  inter_link="ib_ndr" if ranks > gpus_per_node else None)
    plan = STRATEGIES[strategy]  # a group (capped at the world) only for the strategies that have one
    mesh = DataMesh.of(plan, ranks, gpus_per_node, min(group, ranks) if plan.uses_groups else None)
    result, engine = meta_step(model, None, None, hw, comm, precision, tokens, time_model=time_model, mesh=mesh,
                               recipe=recipe_of(strategy))  # as cli/strategy_args.py: the framework's recipe
    size = mesh.group
    return result, engine, hw, size


def strategy_step(model, ranks: int, strategy: str, gpus_per_node: int, group: int | None, device: str = "h100",
                  comm=None, precision: str = "fp16-mixed", tokens: int = TOKENS, time_model=None) -> StrategyRow:
    """One step of `strategy` on `ranks` meta ranks (nodes of `gpus_per_node`), simulated on two link tiers."""
    result, engine, hw, size = strategy_timeline(model, ranks, strategy, gpus_per_node, group, device, comm,
                                                 precision, tokens, time_model)
    sent, ledger = engine.cluster.trace.bytes_by_tier(), engine.cluster.ranks[0].ledger
    states = {k: v for k, v in ledger.by_kind().items() if v and (k in ("params", "grads", "master")
                                                                  or k.startswith("optim:"))}
    busy = dict.fromkeys(sent, 0.0)
    for iv in result.track(0, "comm"):
        busy[iv.event.tier if hw.inter_link is not None else "intra-node"] += iv.end - iv.start
    return StrategyRow(strategy, ranks, size, result.step_time, float(result.compute_busy[0]),
                       float(result.exposed_comm[0]), ledger.peak(), sent["intra-node"] / ranks,
                       sent["inter-node"] / ranks, states, ledger.peak("secondary"), busy)


def strategy_sweep(model, ranks_list=RANKS, strategies=STRATEGIES, gpus_per_node: int = 8,
                   shard_group: int | None = None, hpz_group: int | None = None, device: str = "h100", comm=None,
                   precision: str = "fp16-mixed", tokens: int = TOKENS, progress=None, time_model=None) -> list:
    """[StrategyRow] for every (strategy, N). S defaults to `fitting_shard_group`, S' to a node."""
    from zerosim.parallel.data import get_plan

    shard_group = shard_group or fitting_shard_group(model.num_params, gpus_per_node)
    hpz_group = hpz_group or gpus_per_node
    rows, total = [], len(strategies) * len(ranks_list)
    for strategy in strategies:
        group = shard_group if get_plan(strategy).sharded_over != "world" else hpz_group  # S, or S'
        for n in ranks_list:
            rows.append(strategy_step(model, n, strategy, gpus_per_node, group, device, comm, precision, tokens,
                                      time_model))
            if progress is not None:
                progress(len(rows), total)
    return rows


def crossover(rows, strategy: str) -> int | None:
    """The smallest N of the sweep at which `strategy`'s exposed communication exceeds its compute, or None."""
    for row in sorted((r for r in rows if r.strategy == strategy), key=lambda r: r.ranks):
        if row.exposed > row.compute:
            return row.ranks
    return None


def hsdp_bound_ranks(unit_params: float, tokens: int, hardware: Hardware, shard_group: int,
                     rate: float | None = None) -> float | None:
    """N* = S·(1 + (4ΦT/R_dev − 4Φ/(S·β)) / (2α)) over `hardware`'s inter-node link: where the replicas' all-reduce
    of a unit's 2Φ/S piece takes as long as its backward. None when its bytes alone take longer (no N hides it).
    `rate`: the FLOP/s compute runs at (default the device's dense peak)."""
    link = hardware.link_of("inter-node")
    rate = hardware.device.rate(hardware.compute) if rate is None else rate
    slack = 4 * unit_params * tokens / rate - 4 * unit_params / (shard_group * link.bandwidth)
    if slack <= 0:
        return None
    return shard_group * (1 + slack / (2 * link.alpha))
