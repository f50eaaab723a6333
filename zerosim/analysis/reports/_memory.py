"""Per-rank memory at real scale, as reports: what `zerosim memory` prints (its `--json` is `to_dict()`).

    memory_report(work, 64)                             ZeRO stages 0-3: each measured by the meta backend's ledgers
                                                        beside the formula; activations by name; the fit on a GPU;
                                                        the seeds' byte conventions and seed 001's erratum
    strategy_memory_report(work, [DataMesh.of("hsdp", 4096, 8, 64), ...])
                                                        the strategies for many nodes: states, secondary pieces,
                                                        peaks and bytes per link tier

Letters: Ψ parameters, N ranks, S a strategy's shard group, K bytes of optimizer state per parameter. Every number is
what the ledgers and the trace recorded in one step of the real engine on data-less arrays
(analysis/costs `measure_stage`); the formulas (analysis/costs `model_state_memory`, `comm_volume`) stand beside them.
"""

from __future__ import annotations

from dataclasses import replace

from zerosim._dataclass import dataclass
from zerosim.analysis.reports._context import cp_activations, cp_sent
from zerosim.analysis.reports._fit import judge
from zerosim.analysis.reports._pipeline import pp_sent
from zerosim.analysis.reports._step import Report, optional
from zerosim.analysis.reports._tensor import local_params, padded_vocab, tp_activations, tp_sent


@dataclass(frozen=True)
class MemoryReport(Report):
    """The stages' memory (see the module docstring)."""

    model: str
    params: int
    layers: int
    largest_layer: int
    ranks: int
    optimizer: str
    precision: str
    unit: str | None  # what a unit is: "block", "module", "sublayer", "layer"
    step: bool  # False: the resting state after initialisation only
    wire: str | None  # stage 3's weight gathers in fewer bits (ZeRO++), in words
    offload: dict | None = optional()  # with offload: its configuration, the host's preset (cli/offload_args.py)
    activations: dict | None  # one rank's micro-batch, measured by name beside the count by hand
    tensor_parallel: dict | None = optional()  # beside TP: {"tp", "sp", "dp", "local_params", "vocab", ...}
    context_parallel: dict | None = optional()  # beside CP: {"cp", "style", "split", "dp", "seq_len", ...}
    # beside PP: {"pp", "schedule", "virtual_stages", "micro_batches", "dp", "split"}; each row's "pipeline" its ranks'
    pipeline_parallel: dict | None = optional()
    stages: list  # one measured row per stage, with its formula
    gpu: dict | None  # the GPU and each stage's verdict
    config: dict | None  # the model config's keys: modelled, not modelled, no effect
    ds_config: dict | None  # the DeepSpeed config's settings and keys
    conventions: list  # the byte-per-parameter conventions side by side
    seed001_erratum: dict


def memory_report(work, ranks: int, stages=(0, 1, 2, 3), wire=None, step: bool = True, unit: str | None = None,
                  mesh=None, recipe=None, show_progress: bool | None = None, tp: int = 1, sp: bool = False,
                  gpus_per_node: int | None = None, parallelisms=None, layout: str | None = None,
                  spec=None, micro_batches: int | None = None) -> MemoryReport:
    """The memory of `stages` for `work` (a Workload) on `ranks` ranks (see the module docstring). `mesh`: a DataMesh
    for the one stage that needs nodes (ZeRO++'s qgZ at stage 3); `wire`: ZeRO++'s Wire for stage 3; `recipe`: the
    gradient recipe (None: each plan's default); `unit`: how the report names the model's units. `tp`, `sp`: each
    stage beside tensor (and sequence) parallelism, `ranks` every GPU placed `gpus_per_node` to a node; the formulas
    then read one TP rank's slice over its ranks / tp data-parallel ranks, the activations one TP rank's, as
    `layout` keeps them (parallel/tensor LAYOUTS; None: the library's default).
    `parallelisms(stage)`: the other parallelisms a stage runs with (offload: each row then holds its "host" and
    "nvme" ledgers; the caller adds the report's `offload` block), or None. `spec`: a ParallelSpec in place of `tp`,
    `sp` and `layout`, with context parallelism: each rank then holds L / C tokens of the micro-batch's sequences,
    the activations by name beside the unsplit layer's (_context.py), ZeRO sharding over dp × cp as torchtitan's
    "fsdp" mesh does; or pipeline parallelism: each ZeRO stage then runs the pipeline's engine for a whole step of
    `micro_batches` M a data-parallel rank (default P), one representative rank a pipeline stage, each row's
    "pipeline" holding every pipeline rank's units, parameters, peaks and chunks in flight, its "peak" and resting
    states the largest rank's (costs `peak_rank`: mostly the first, which holds the most micro-batches in flight)
    beside the formula for that rank's parameters over its N / (T·P) data-parallel ranks; each pipeline rank's bytes
    sent (the trace's) beside its formula (_pipeline.py), the row's the most of them."""
    from zerosim.parallel import ParallelSpec
    from zerosim.parallel.data import get_plan

    spec = ParallelSpec.of(spec, tp, sp, layout)
    tp, sp, layout = spec.tp, spec.sp, spec.tp_layout
    from zerosim.analysis.costs import (
        MemoryConfig,
        comm_volume,
        measure_by_stage,
        measure_stage,
        model_state_memory,
    )

    model, micro, N = work.model, work.micro, ranks
    if mesh is not None:  # one stage on nodes (qgZ): its own mesh
        measured = [measure_stage(model, None, None, work.optimizer, work.precision, step=step, micro_batch=micro,
                                  comm=work.comm, clip_grad=work.clip_grad, wire=wire, mesh=mesh, recipe=recipe,
                                  timeline=False)[0]]
    else:
        measured = measure_by_stage(model, N, work.optimizer, work.precision, step=step, stages=stages,
                                    show_progress=show_progress, micro_batch=micro, comm=work.comm,
                                    clip_grad=work.clip_grad, wire=wire, tp=tp, sp=sp,
                                    gpus_per_node=gpus_per_node if tp > 1 or spec.cp > 1 or spec.pp > 1 else None,
                                    parallelisms=parallelisms, spec=spec, micro_batches=micro_batches)
    name, P = work.precision_name, model.num_params
    local, dp = (P, N) if tp == 1 else (local_params(model, tp, sp), N // tp)  # one TP rank's slice, its dp ranks
    config = MemoryConfig.for_precision(name, optimizer=work.optimizer, padding="all")  # the engines pad every buffer
    for row in measured:
        if spec.pp > 1:  # the rank that peaks: its stage's parameters (a TP slice's) over its N / (T·P) ranks (dp × cp)
            top = max(row["pipeline"], key=lambda x: x["peak"])
            local, dp = top["params"], N // (tp * spec.pp)
        plan = get_plan(row["beside_pipeline"]) if "beside_pipeline" in row else row["stage"]  # what the stage ran
        formula = model_state_memory(local, dp, plan, config)
        row["formula"] = {k: v for k, v in formula.by_kind.items() if v}
        row["formula_total"] = formula.total
        row["formula_unpadded_total"] = model_state_memory(
            local, dp, plan, MemoryConfig.for_precision(name, optimizer=work.optimizer, padding="none")
        ).total
        row["ledger_total"] = sum(row["resting"].values())
        if not step:  # no step, nothing sent: null, not a 0 that reads as a mismatch beside a step's formula
            row["sent"] = None
            for x in row.get("pipeline", ()):
                x["sent"] = None
        bytes_ = config.param_bytes  # the compute format travels: 2 bytes, or 4 in pure fp32
        if spec.pp > 1:  # each pipeline rank's, by hand (_pipeline.py); the most of them
            by_rank = pp_sent(model, micro, spec, bytes_, pipeline_summary(spec, N, micro_batches)["micro_batches"],
                              plan, dp, [x["params"] for x in row["pipeline"]])
            for x, formula in zip(row["pipeline"], by_rank):
                x["sent_formula"] = formula
            row["sent_formula"] = max(by_rank)
        else:  # ZeRO's own (3Ψ at stage 3, of a TP rank's slice over its dp ranks), then the other parallelisms'
            zero = comm_volume(local, dp, row["stage"], grad_wire_bytes=bytes_, param_wire_bytes=bytes_)
            row["sent_formula"] = row["sent_formula_zero"] = zero
        if tp > 1 and spec.pp == 1:  # and TP's activations' collectives (tensor/_costs.py), a CP rank's L / C tokens
            row["sent_formula"] += tp_sent(model, spec.micro(*micro), tp, sp, bytes_)
        if spec.cp > 1 and spec.pp == 1:  # and the K/V's, on the CP group (_context.py)
            row["sent_formula"] += cp_sent(model, micro, spec, bytes_)
        if micro is not None:  # seed 001 §6: model states + activations (every rank holds its own micro-batch's)
            row["activations"] = row["peak_by_kind"].get("activations", 0)
            row["total"] = row["ledger_total"] + row["activations"]
    return MemoryReport(
        model=model.name, params=P, layers=len(model.layers), largest_layer=model.largest_layer, ranks=N,
        optimizer=work.optimizer, precision=name, unit=unit, step=step,
        wire=None if wire is None else wire.describe(), offload=None,
        activations=None if micro is None else (
            cp_activations(model, micro, work.checkpointing or "none", work.precision, spec) if spec.cp > 1 else
            activations(model, micro, work.checkpointing, work.precision) if tp == 1 else
            tp_activations(model, micro, work.checkpointing or "none", work.precision, tp, sp, layout)),
        context_parallel=None if spec.cp == 1 else {"cp": spec.cp, "style": spec.cp_style, "split": spec.cp_split,
                                                    "dp": spec.dims(N).dp},
        pipeline_parallel=None if spec.pp == 1 else pipeline_summary(spec, N, micro_batches),
        tensor_parallel=None if tp == 1 else {"tp": tp, "sp": sp, "dp": dp, "local_params": local,
                                              "vocab": padded_vocab(model, tp),
                                              "vocab_padded": padded_vocab(model, tp) != model.vocab},
        stages=measured, gpu=_gpu(work, measured, N), config=None if work.config is None else
        _keys(work.config.keys + work.config.defaults), ds_config=_ds_config(work),
        conventions=_conventions(P, N, model.largest_layer, work.optimizer, name), seed001_erratum=_erratum(),
    )


def pipeline_summary(spec, ranks: int, micro_batches: int | None) -> dict:
    """What a report says of a pipeline: its degree, schedule, virtual stages a rank, micro-batches a step (a data-
    parallel rank's), the data-parallel degree N / (T·P) and the split rule (parallel/pipeline RULES)."""
    from zerosim.parallel.pipeline import get_schedule

    return {"pp": spec.pp, "schedule": spec.pp_schedule,
            "virtual_stages": spec.virtual_stages or get_schedule(spec.pp_schedule).default_virtual,
            "micro_batches": spec.pp if micro_batches is None else micro_batches, "dp": spec.dims(ranks).dp,
            "split": spec.pp_split}


def _gpu(work, measured: list, ranks: int) -> dict | None:
    if work.gpu is None:
        return None
    g, buckets = work.gpu, work.buckets
    return {"key": g.key, "name": g.name, "capacity": g.capacity, "datasheet": g.datasheet,
            "by_stage": [judge(row["peak"], row["stage"], ranks, g, work.reserve, buckets) for row in measured]}


def _ds_config(work) -> dict | None:
    ds = work.ds
    if ds is None:
        return None
    return {"stage": ds.stage, "micro_batch": ds.micro_batch, "accumulation_steps": ds.accumulation_steps,
            "train_batch_size": ds.train_batch_size, "clip_grad": ds.clip_grad, "precision": work.precision_name,
            "loss_scale": ds.precision.loss_scale, "wire": ds.precision.reduce_format.name, "optimizer": ds.optimizer,
            "comm": {f: getattr(work.comm, f) for f in work.comm.__dataclass_fields__}, "keys": _keys(ds.keys)}


def _conventions(P: int, N: int, largest: int, optimizer: str, precision: str) -> list:
    from zerosim.analysis.costs import conventions_table

    return [{"name": r.name, "bytes": list(r.bytes), "note": r.note, "erratum": list(r.erratum)}
            for r in conventions_table(P, N, largest, optimizer, precision)]


def _erratum() -> dict:
    from zerosim.analysis.costs import seed001_formulas, seed001_printed_table

    printed, own = seed001_printed_table(), seed001_formulas(7e9, 8)
    return {"printed_gb": list(printed.gb()), "formulas_gb": list(own.gb()), "stages": list(printed.erratum),
            "note": "seed 001's printed table (7B on 8 GPUs) disagrees with its own formulas 4P + 12P/N and 2P + 14P/N"}


def _keys(keys) -> dict:
    """{status: [{"key", "value", "note"}]} of a config's key report."""
    out = {}
    for k in keys:
        out.setdefault(k.status, []).append({"key": k.key, "value": k.value, "note": k.note})
    return out


def activations(model, micro: tuple, checkpointing: str | None, precision) -> dict:
    """The measured activations of one rank's micro-batch, beside the per-layer count written out by hand."""
    from zerosim.analysis.costs import measure_activations
    from zerosim.models.llama import MetaLlama
    from zerosim.precision import get_precision

    B, L = micro
    a = measure_activations(model, B, L, precision)
    width = get_precision(precision).compute_format.dtype.itemsize  # bytes per activation element
    P = B * model.n_heads * L * L if model.attention == "standard" else 0  # the softmax output, kept with "standard"
    out = {
        "seq_len": L, "batch": B, "checkpoint": checkpointing or "none", "d_model": model.d_model,
        "heads": model.n_heads, "blocks": model.n_layers, "vocab": model.vocab, "bytes_per_element": width,
        "per_block": a.per_block, "per_block_total": a.per_block_total, "outside_blocks": a.outside, "peak": a.peak,
        "peak_at": a.peak_at, "layout": "llama" if isinstance(model, MetaLlama) else "gpt2",
    }
    if out["layout"] == "llama":
        # models/llama/_block.py: (2d + 2·H·d_h + 2·G·d_h + 3F)·B·L elements (x, Q, K, V, O, h, gate, up, SwiGLU's h) +
        # P,
        # in the compute format, + two fp32 RMSNorm statistics per token
        q, kv = model.n_heads * model.head_dim, model.n_kv_heads * model.head_dim
        out |= {
            "kv_heads": model.n_kv_heads,
            "head_dim": model.head_dim,
            "d_ff": model.d_ff,
            "formula_per_layer": ((2 * model.d_model + 2 * q + 2 * kv + 3 * model.d_ff) * B * L + P) * width
            + 8 * B * L,
        }
    else:  # seed 001 §5e: "14·B·L·d + B·H·L²" per layer, without the B·H·L² when P is not kept (selective, flash)
        out["seed001_per_layer"] = (14 * B * L * model.d_model + P) * width
    return out


@dataclass(frozen=True)
class StrategyMemoryReport(Report):
    """The strategies' memory (see the module docstring)."""

    model: str
    params: int
    ranks: int
    optimizer: str
    precision: str
    gpus_per_node: int | None
    tensor_parallel: dict | None = optional()  # beside TP: {"tp", "sp", "dp"}
    strategies: list  # one row per strategy: {"strategy", "group", "replicas", "recipe", "resting", ...}


def strategy_memory_report(work, meshes: list, step: bool = True, sp: bool = False,
                           layout: str | None = None) -> StrategyMemoryReport:
    """One measured row per strategy, each on its `DataMesh` (all of one N, one tp), with its framework's recipe, the
    hand formula of its states, (2 + g + 4 + K)·Ψ / shards, and the bytes each tier carried per rank. Beside tensor
    parallelism (the meshes' tp, with `sp`) the formula reads one TP rank's slice over its N / tp data-parallel
    ranks."""
    from zerosim.analysis.costs import MemoryConfig, measure_stage, model_state_memory
    from zerosim.analysis.planner import recipe_of

    N, tp = meshes[0].dims.world_size, meshes[0].dims.tp
    rows = []
    for mesh in meshes:
        name = mesh.plan.name
        row, cluster, engine = measure_stage(work.model, None, None, work.optimizer, work.precision, step, work.micro,
                                             work.comm, work.clip_grad, sp=sp, mesh=mesh, recipe=recipe_of(name),
                                             layout=layout)
        P = engine.model.num_params  # the model's, or one TP rank's slice
        grads = engine.cluster.ranks[0].grads.array.dtype.itemsize  # the recipe's: FSDP2 keeps fp32 gradients
        config = replace(MemoryConfig.for_precision(work.precision_name, optimizer=work.optimizer, padding="none"),
                         fp32_grad_accum=grads == 4)
        formula = model_state_memory(P, mesh.shards, mesh.plan, config)  # stage 3's shards (no_reshard_no_sync's
        #                                                                  gradients whole)
        secondary = config.param_bytes * P / mesh.group if mesh.plan.reshard.keeps_piece else 0
        rows.append({
            "strategy": name, "group": mesh.group, "replicas": mesh.replicas, "recipe": engine.recipe.reduction,
            "resting": row["resting"], "resting_total": sum(row["resting"].values()), "formula_total": formula.total,
            "secondary_peak": cluster.ranks[0].ledger.peak("secondary"), "secondary_formula": secondary,
            "peak": row["peak"], "tiers": row["tiers"],
        })
    return StrategyMemoryReport(model=work.model.name, params=work.model.num_params, ranks=N, optimizer=work.optimizer,
                                precision=work.precision_name, gpus_per_node=meshes[0].gpus_per_node,
                                tensor_parallel=None if tp == 1 else {"tp": tp, "sp": sp, "dp": N // tp},
                                strategies=rows)
