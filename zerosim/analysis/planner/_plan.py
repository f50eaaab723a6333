"""The planner: which ZeRO stage × checkpointing strategy × micro-batch fits a GPU, and how long each step takes.

    p = plan(read_hf_config("config.json"), ranks=64, gpus_per_node=8, gpu="h100-80gb", seq_len=4096,
             global_batch=1024, precision="bf16-mixed")
    p.fitting[0]            # the fastest configuration that fits: its stage, strategy, micro-batch, time, memory

Letters: N ranks, B sequences per rank per micro-step, K micro-steps per step, L tokens per sequence; the global
batch is N·B·K sequences.

Every number is the same code's that `zerosim memory` and `zerosim timeline` run: memory is one micro-step of the
model's data-less twin on the meta backend, read from rank 0's ledger (`costs.measured.measure_stage`: the
peak does not change with K, every micro-step holds the same); time is a whole step of K micro-steps, simulated
(`timeline.sweep.step_time`: that same run is K = 1; past K = 2 the line through K = 1 and 2, which a full
simulation stays on to 1e-12) on the GPU's compute preset over NVLink 4 inside a node or InfiniBand NDR when
the ring spans nodes. So a row is reproduced by running those two commands with its settings (`commands`).

The search is pruned, never guessed: a stage whose model states alone exceed the GPU is skipped (no strategy
or micro-batch can make them smaller), and a strategy's micro-batches are tried smallest first, stopping at
the first that does not fit (every activation grows with B, nothing else changes). Candidates that fit are
ranked by step time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from zerosim.analysis.costs._gpus import get_gpu
from zerosim.analysis.costs._overheads import ALLOCATOR_RESERVE, fit, runtime_overheads
from zerosim.analysis.planner._sweep import step_time, step_time_of
from zerosim.analysis.timeline._devices import Hardware
from zerosim.analysis.timeline._simulate import simulate


@dataclass(frozen=True)
class PlanRow:
    """One configuration tried: its memory (measured), the verdict, and its step (simulated) when it fits."""

    stage: int
    strategy: str  # a checkpointing strategy (models.gpt.STRATEGIES)
    micro_batch: int  # B
    accumulation: int  # K
    peak: int  # rank 0's ledger peak, bytes
    at_peak: dict  # {kind: bytes} live at the moment of the peak (sums to peak)
    resting: int  # the model states left after the step, bytes
    overheads: int  # the labelled estimates (costs.overheads), bytes
    capacity: int  # the GPU's, bytes
    step_s: float | None = None  # None when it does not fit (not timed)
    compute_s: float | None = None
    exposed_s: float | None = None

    @property
    def total(self) -> int:
        return self.peak + self.overheads

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    @property
    def margin(self) -> int:
        return self.capacity - self.total


@dataclass(frozen=True)
class Plan:
    """Every configuration tried, the fitting ones ranked by step time, the stages pruned, and the settings."""

    rows: tuple  # every PlanRow measured
    fitting: tuple  # the rows that fit, fastest first
    pruned: tuple  # ((stage, model-state bytes), ...): stages whose model states alone do not fit
    settings: dict  # what was asked: model, ranks, gpus_per_node, gpu, seq_len, global_batch, precision, ...
    link: str  # the ring's link

    def commands(self, row: PlanRow, model_flag: str) -> tuple:
        """The `zerosim memory` and `zerosim timeline` command lines that reproduce `row` (model_flag: "--model X"
        or "--config PATH")."""
        s = self.settings
        common = (
            f"{model_flag} --ranks {s['ranks']} --seq-len {s['seq_len']} --batch {row.micro_batch} "
            f"--checkpoint {row.strategy} --gpu {s['gpu']} --precision {s['precision']} --optimizer {s['optimizer']} "
            f"--comm {s['comm']}"
        )
        return (
            f"zerosim memory {common}",
            f"zerosim timeline {common} --stage {row.stage} --accumulation-steps {row.accumulation} "
            f"--gpus-per-node {s['gpus_per_node']}",
        )


def divisors(n: int) -> tuple:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def plan(
    config,
    ranks: int,
    gpus_per_node: int,
    gpu,
    seq_len: int,
    global_batch: int,
    precision: str = "bf16-mixed",
    optimizer: str = "adam",
    comm: str = "deepspeed",
    stages=(0, 1, 2, 3),
    strategies=None,
    micro_batches=None,
    reserve: float = ALLOCATOR_RESERVE,
    progress=None,
) -> Plan:
    """Try every stage × strategy × micro-batch for `config` (a DecoderConfig) on `ranks` GPUs (see the module
    docstring); `progress(done_label)` is called after each configuration measured."""
    from zerosim.analysis.costs._measured import measure_stage
    from zerosim.models.gpt import STRATEGIES, MetaGPT, strategy_options
    from zerosim.models.llama import MetaLlama
    from zerosim.parallel.data import get_comm_schedule
    from zerosim.precision import get_precision

    g = get_gpu(gpu)
    for name, v in (
        ("ranks", ranks),
        ("gpus_per_node", gpus_per_node),
        ("seq_len", seq_len),
        ("global_batch", global_batch),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if global_batch % ranks:
        raise ValueError(
            f"a global batch of {global_batch} sequences does not split over {ranks} ranks "
            f"(each rank takes micro-batch × accumulation sequences per step)"
        )
    if seq_len > config.max_positions:
        raise ValueError(f"--seq-len {seq_len} is longer than {config.name}'s {config.max_positions} positions")
    per_rank = global_batch // ranks
    batches = tuple(b for b in (micro_batches or divisors(per_rank)) if per_rank % b == 0)
    if not batches:
        raise ValueError(f"no micro-batch divides the {per_rank} sequences each rank takes per step")
    strategies = tuple(strategies or STRATEGIES)
    link = "ib_ndr" if ranks > gpus_per_node else "nvlink4"
    hw = Hardware(g.device, link, get_precision(precision).compute)
    schedule = get_comm_schedule(comm)
    twin = MetaLlama if config.layout == "llama" else MetaGPT
    rows, pruned = [], []
    twins = {}  # strategy -> the model's data-less twin: built once, measured at every stage
    for stage in stages:
        stage_rows = []
        for strategy in strategies:
            if strategy not in twins:
                twins[strategy] = twin.from_config(config, seq_len, **strategy_options(strategy))
            model = twins[strategy]
            for B in batches:
                m, cluster, engine = measure_stage(
                    model, ranks, stage, optimizer, precision, micro_batch=(B, seq_len), comm=schedule
                )
                resting = sum(m["resting"].values())
                extra = sum(o.bytes for o in runtime_overheads(m["peak"], ranks, stage, None, reserve))
                row = PlanRow(stage, strategy, B, per_rank // B, m["peak"], m["at_peak"], resting, extra, g.capacity)
                if progress is not None:
                    progress(f"ZeRO-{stage} {strategy} B={B}")
                if fit(resting, g).total > g.capacity:  # the model states alone: nothing here can fit this stage
                    pruned.append((stage, resting))
                    break
                if row.fits:
                    one = step_time_of(simulate(cluster.trace, hw, overlap=engine.comm.overlap_comm))  # the same run
                    t = step_time(
                        model,
                        ranks,
                        stage,
                        hw,
                        schedule,
                        precision,
                        optimizer,
                        (B, seq_len),
                        row.accumulation,
                        first=one,
                    )
                    row = replace(row, step_s=t.step, compute_s=t.compute, exposed_s=t.exposed)
                stage_rows.append(row)
                if not row.fits:
                    break  # a larger micro-batch only holds more activations
            if pruned and pruned[-1][0] == stage:
                break
        rows += stage_rows
    fitting = tuple(sorted((r for r in rows if r.fits), key=lambda r: (r.step_s, r.stage, r.micro_batch)))
    settings = {
        "model": config.name,
        "params": config.num_params,
        "ranks": ranks,
        "gpus_per_node": gpus_per_node,
        "gpu": g.key,
        "gpu_name": g.name,
        "capacity": g.capacity,
        "device": g.device,
        "seq_len": seq_len,
        "global_batch": global_batch,
        "per_rank": per_rank,
        "precision": precision,
        "optimizer": optimizer,
        "comm": comm,
        "reserve": reserve,
        "strategies": strategies,
        "micro_batches": batches,
        "stages": tuple(stages),
    }
    return Plan(tuple(rows), fitting, tuple(pruned), settings, link)
