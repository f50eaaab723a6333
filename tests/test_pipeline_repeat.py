"""On the meta backend a pipeline writes alike actions again from a record instead of running them
(zerosim/parallel/pipeline/_repeat.py): every event of the trace, every ledger's peaks and totals, and the timeline's
numbers must be what running every action gives, on every schedule, ZeRO stage 1 and 3 (torchtitan's FSDP), TP 1
and 2 and CP 1, 2 and 4 (its ring and its all-gather), over two steps. The run with `repeat=False` is the yardstick:
it runs every action.

The model is small enough to run in a second and cut so that two middle pipeline ranks hold stages of one make (a
Llama of 10 blocks over 4 ranks: torchtitan's split gives the embedding and 2 blocks, 3, 3, 2 blocks and the head), so
records are written again on their own rank and on another.
"""

from collections import Counter

import numpy as np
import pytest

from zerosim import Adam, Cluster
from zerosim.analysis.timeline import Hardware, simulate
from zerosim.models import Llama, MetaLlama
from zerosim.parallel import ParallelDims
from zerosim.parallel.context import ContextParallel
from zerosim.parallel.pipeline import PipelineEngine
from zerosim.parallel.tensor import TensorParallel

P, M, SEQ = 4, 6, 16


def run(schedule: str, V: int, stage: int, recipe: str, tp: int, repeat: bool, steps: int = 2, cp: int = 1,
        style: str = "ring", micro_batches: int = M, records_from=None, time_only: bool = False):
    """A PipelineEngine's meta run, as analysis/costs `pipeline_run` builds one (`ParallelSpec.build`): with `cp` > 1
    the CP rank's twin (flash attention, cut at its ring or all-gather: `style`) on SEQ / cp tokens a rank."""
    model = Llama(vocab=256, d_model=64, n_heads=4, n_layers=10, seq_len=SEQ, d_ff=128, n_kv_heads=2,
                  checkpoint="block", **({} if cp == 1 else {"attention": "flash"}))
    N = P * tp * cp * 2
    dims = ParallelDims(N, pp=P, tp=tp, cp=cp)
    cluster = Cluster(N, backend="meta", hosted=dims.groups("pp").group_of(0), trace="call", timeline=False,
                      gpus_per_node=4)
    tensor = TensorParallel(MetaLlama(model), tp) if tp > 1 else None
    context = ContextParallel(MetaLlama(model), cp, style, tensor=tensor) if cp > 1 else None
    whole = context.model if context is not None else MetaLlama(model) if tensor is None else tensor.model
    engine = PipelineEngine(whole, cluster, stage, Adam(), "bf16-mixed", pp=P, micro_batches=micro_batches,
                            schedule=schedule, virtual_stages=V, tensor=tensor, recipe=recipe, repeat=repeat,
                            context=context, records_from=records_from, time_only=time_only)
    ids = cluster.backend.empty((1, SEQ // cp), np.int64)
    for _ in range(steps):
        engine.step([[(ids, ids)] * micro_batches for _ in range(dims.dp)])
    return engine, cluster


def what_a_user_reads(cluster) -> dict:
    trace = cluster.trace
    timeline = simulate(trace, Hardware("h100", "nvlink4", inter_link="ib_ndr"))
    return {
        "log": [repr(e) for e in trace.log],
        "closed forms": trace.ring_calls,
        "groups": trace.call_groups,
        "bytes by tier": trace.bytes_by_tier(),
        "sent by rank": list(trace.sent_totals(cluster.world_size)),
        "peaks": [(r.ledger.peak(), r.ledger.peak_by_kind()) for r in cluster.ranks],
        "at the peak": [list(r.ledger.at_peak().items()) for r in cluster.ranks],  # by kind, in order (plan bars)
        "now": [(r.ledger.current(), dict(r.ledger._current), r.ledger._seq) for r in cluster.ranks],
        "step time": timeline.step_time,
        "per rank": (timeline.compute_busy.tolist(), timeline.exposed_comm.tolist()),
    }


@pytest.mark.slow
@pytest.mark.parametrize("schedule, V, stage, recipe, tp", [
    ("1f1b", 1, 1, "seeds", 2),  # Megatron's distributed optimizer beside TP
    ("1f1b", 1, 3, "fsdp2", 2),  # torchtitan's FSDP beside TP
    ("gpipe", 1, 3, "fsdp2", 1),
    ("interleaved-1f1b", 2, 1, "seeds", 2),
    ("zero-bubble", 2, 1, "seeds", 1),
    ("1f1b", 1, "no_reshard_no_sync", "seeds", 2),  # torchtitan's FSDP beside PP: gathered once a step, freed after
    ("interleaved-1f1b", 2, "no_reshard_no_sync", "seeds", 1),  # each chunk's backward in the last micro-batch
])
def test_writing_actions_again_changes_nothing_a_user_reads(schedule, V, stage, recipe, tp):
    written_again_is_run(schedule, V, stage, recipe, tp)


@pytest.mark.slow
@pytest.mark.parametrize("schedule, V, stage, recipe, tp, cp, style", [
    ("1f1b", 1, 1, "seeds", 1, 2, "ring"),  # the long-context points' pipeline (zerosim validate --only ...-cp2)
    ("1f1b", 1, 3, "fsdp2", 2, 2, "ring"),  # ... beside TP, under torchtitan's FSDP, as those points run
    ("gpipe", 1, 3, "fsdp2", 1, 4, "ring"),
    ("interleaved-1f1b", 2, 1, "seeds", 1, 2, "ring"),
    ("zero-bubble", 2, 1, "seeds", 1, 2, "ring"),  # a backward-input is a backward to the ring
    ("interleaved-1f1b", 2, "no_reshard_no_sync", "seeds", 1, 2, "allgather"),  # the Llama 3 paper's 128k point's
    ("1f1b", 1, 1, "seeds", 1, 4, "allgather"),
])
def test_writing_actions_again_beside_context_parallelism(schedule, V, stage, recipe, tp, cp, style):
    """A CP ring's calls are tagged by its hops' units ("block2.attn.hop0: K, V to the next rank"), and on the meta
    backend its sends are recorded for every rank of the stage the representative stands for: written again on
    another stage, both are that stage's."""
    written_again_is_run(schedule, V, stage, recipe, tp, cp, style)


def written_again_is_run(schedule, V, stage, recipe, tp, cp=1, style="ring"):
    """Every number a user reads of a run whose alike actions are written again is the run's that runs them."""
    engine, written = run(schedule, V, stage, recipe, tp, True, cp=cp, style=style)
    _, ran = run(schedule, V, stage, recipe, tp, False, cp=cp, style=style)
    plan = Counter(engine._records.plan.values())
    assert plan["write again"] >= plan["run"] + plan["record"]  # at least half (most, but where the last micro-batch
    #                                                              runs too: FSDP2 beside PP frees its units there)
    again, yardstick = what_a_user_reads(written), what_a_user_reads(ran)
    for key in yardstick:
        assert again[key] == yardstick[key], key
    assert [sum(b for _, b in kinds) for kinds in again["at the peak"]] == [peak for peak, _ in again["peaks"]]


@pytest.mark.parametrize("schedule, V, stage, recipe, tp, cp, style", [
    ("1f1b", 1, 1, "seeds", 2, 1, "ring"),  # Megatron's distributed optimizer beside TP (its last micro-batch special)
    ("1f1b", 1, 3, "fsdp2", 1, 2, "ring"),  # torchtitan's FSDP beside CP's ring
    ("interleaved-1f1b", 2, "no_reshard_no_sync", "seeds", 1, 1, "ring"),
    ("zero-bubble", 2, 1, "seeds", 1, 1, "ring"),
])
def test_records_carried_from_a_run_of_other_micro_batches_change_nothing(schedule, V, stage, recipe, tp, cp, style):
    """The planner's two steps on a pipeline's line differ only in M (analysis/costs `line_points`): the second's
    first step writes every middle action again from the first run's records, recording none anew, and every number a
    user reads over two steps (the second records its own) is what running every action of M = 10 gives."""
    first, _ = run(schedule, V, stage, recipe, tp, True, steps=1, cp=cp, style=style)  # M = 6
    once, _ = run(schedule, V, stage, recipe, tp, True, steps=1, cp=cp, style=style, micro_batches=10,
                  records_from=first)
    plan = Counter(once._records.plan.values())
    assert plan["record"] == 0 and plan["write again"] > plan["run"], plan
    _, carried = run(schedule, V, stage, recipe, tp, True, cp=cp, style=style, micro_batches=10, records_from=first)
    _, ran = run(schedule, V, stage, recipe, tp, False, cp=cp, style=style, micro_batches=10)
    again, yardstick = what_a_user_reads(carried), what_a_user_reads(ran)
    for key in yardstick:
        assert again[key] == yardstick[key], key


@pytest.mark.slow
@pytest.mark.parametrize("schedule, V, stage, recipe, tp, cp, style", [
    ("1f1b", 1, 1, "seeds", 2, 1, "ring"),  # Megatron's distributed optimizer beside TP (its last micro-batch special)
    ("1f1b", 1, 3, "fsdp2", 1, 2, "ring"),  # torchtitan's FSDP beside CP's ring
    ("gpipe", 1, 3, "fsdp2", 1, 1, "ring"),
    ("interleaved-1f1b", 2, 1, "seeds", 2, 1, "ring"),
    ("interleaved-1f1b", 2, "no_reshard_no_sync", "seeds", 1, 1, "ring"),  # FSDP2 beside PP: its last micro-batch
    ("1f1b", 1, "no_reshard_no_sync", "seeds", 2, 1, "ring"),
    ("zero-bubble", 2, 1, "seeds", 1, 1, "ring"),
    ("1f1b", 1, 1, "seeds", 1, 4, "allgather"),
])
def test_a_step_read_for_its_time_is_written_whole_from_the_records_it_carries(schedule, V, stage, recipe, tp, cp,
                                                                                style):
    """The planner's second point on a pipeline's line is read for its time alone (`time_only`): a first run of
    M = 6 keeps its special actions' records and each stage's step end too, and the run of M = 10 writes every action
    and every step end again from them, running none; its log, its calls' closed forms, groups and bytes, and its
    timeline are those of the run that runs every action of M = 10."""
    first, _ = run(schedule, V, stage, recipe, tp, True, steps=1, cp=cp, style=style)  # M = 6
    once, written = run(schedule, V, stage, recipe, tp, True, steps=1, cp=cp, style=style, micro_batches=10,
                        records_from=first, time_only=True)
    assert once._records.written and set(once._records.plan.values()) == {"write again"}
    with pytest.raises(RuntimeError, match="written from another run's records"):  # its stages never ran
        once.step([[None] * 10 for _ in range(once.dims.dp)])
    _, ran = run(schedule, V, stage, recipe, tp, False, steps=1, cp=cp, style=style, micro_batches=10)
    again, yardstick = what_a_user_reads(written), what_a_user_reads(ran)
    for key in ("log", "closed forms", "groups", "bytes by tier", "sent by rank", "step time", "per rank"):
        assert again[key] == yardstick[key], key


def test_a_step_read_for_its_time_runs_where_its_records_are_not_whole():
    """Without records of every action and step end (none carried, or carried from a run of two steps, which keeps
    none of its own), a run read for its time runs as ever: its plan runs and records."""
    alone, _ = run("1f1b", 1, 1, "seeds", 1, True, steps=1, micro_batches=10, time_only=True)
    twice, _ = run("1f1b", 1, 1, "seeds", 1, True, steps=2)
    later, _ = run("1f1b", 1, 1, "seeds", 1, True, steps=1, micro_batches=10, records_from=twice, time_only=True)
    for engine in (alone, later):
        assert not engine._records.written and Counter(engine._records.plan.values())["run"] > 0


def test_records_are_carried_only_between_runs_of_one_job():
    """analysis/costs `pipeline_run` carries an earlier run's records only where every argument but M is the same
    (another ZeRO stage's, another micro-batch's, another model's are not read); the engine itself carries none from
    a run of other makes or after more than one step."""
    from zerosim.analysis.costs import pipeline_run
    from zerosim.models.gpt import MetaGPT
    from zerosim.parallel import ParallelSpec
    from zerosim.parallel.data.multinode import DataMesh

    from zerosim.models.hf import read_hf_config, shipped_config

    config = read_hf_config(shipped_config("gpt2-small"))
    model = MetaGPT.from_config(config, 32)
    spec = ParallelSpec(pp=2)

    def carried(first, stage=1, B=1, twin=model) -> int:
        _, engine = pipeline_run(twin, DataMesh.of(stage, 8, 4, pp=2), spec, "adam", "bf16-mixed", (B, 32), 6,
                                 records_from=first)
        return Counter(engine._records.plan.values())["record"] == 0

    _, first = pipeline_run(model, DataMesh.of(1, 8, 4, pp=2), spec, "adam", "bf16-mixed", (1, 32), 4)
    assert carried(first)
    assert not carried(first, stage=3) and not carried(first, B=2)
    assert not carried(first, twin=MetaGPT.from_config(config, 32))  # another model object, though alike
    twice, _ = run("1f1b", 1, 1, "seeds", 1, True, steps=2)
    later, _ = run("1f1b", 1, 1, "seeds", 1, True, steps=1, micro_batches=10, records_from=twice)
    assert Counter(later._records.plan.values())["record"] > 0
    small = Llama(vocab=256, d_model=64, n_heads=4, n_layers=6, seq_len=SEQ, d_ff=128, n_kv_heads=2)
    cluster = Cluster(16, backend="meta", hosted=ParallelDims(16, pp=P).groups("pp").group_of(0), trace="call",
                      timeline=False, gpus_per_node=4)
    other = PipelineEngine(MetaLlama(small), cluster, 1, Adam(), "bf16-mixed", pp=P, micro_batches=10,
                           records_from=twice)  # 6 blocks over 4 ranks: other makes than 10 blocks'
    assert other._records.carried == {}
    with pytest.raises(TypeError, match="records_from must be a PipelineEngine"):
        PipelineEngine(MetaLlama(small), cluster, 1, Adam(), "bf16-mixed", pp=P, micro_batches=10, records_from="run")


def test_records_cross_to_a_rank_of_the_same_make():
    """Ranks 1 and 2 hold stages of one make (3 blocks each): a forward made on rank 1 is written again on rank 2, a
    backward made on rank 2 (the backward flows down) is written again on rank 1; the first and last ranks (embedding,
    head) have makes of their own."""
    engine, _ = run("1f1b", 1, 1, "seeds", 1, repeat=True, steps=1)
    records = engine._records
    assert records.makes[1] == records.makes[2] and len(set(records.makes)) == 3
    by_rank = {(a.rank, a.micro, a.kind): w for a, w in records.plan.items()}
    assert by_rank[(1, 1, "forward")] == "record" and by_rank[(2, 2, "forward")] == "write again"
    # rank 2 meets micro-batch 1's backward first and records it: its forward of micro-batch 1 had to run (a forward
    # written again has its backward written again); rank 1's, whose forward ran, runs; its later ones are written
    assert by_rank[(2, 1, "forward")] == by_rank[(1, 1, "backward")] == "run"
    assert by_rank[(2, 1, "backward")] == "record" and by_rank[(1, 2, "backward")] == "write again"
    assert all(w == "run" for (r, k, _), w in by_rank.items() if k == 0)  # each stage makes its own buffers


def test_only_the_meta_backend_writes_again():
    gpt_cluster = Cluster(4)
    from zerosim.models import GPT

    engine = PipelineEngine(GPT(vocab=16, d_model=8, n_heads=2, n_layers=2, seq_len=4), gpt_cluster, 1, Adam(),
                            "bf16-mixed", pp=2, micro_batches=4)
    assert not engine._records.on and engine._records.plan == {}


def test_a_finished_meta_pipeline_run_leaves_nothing_to_the_cyclic_collector():
    """A meta pipeline run let go (Cluster.let_go) is freed with its last reference: nothing in a cycle (the records'
    plan once held the PipelineEngine in a lambda, so NeMo's GPT-3 175B point's ~3·10^5 objects waited for the
    collector, 0.3-0.5 s of visiting each time)."""
    import gc

    from zerosim.analysis.costs import pipeline_run
    from zerosim.models.gpt import MetaGPT
    from zerosim.models.hf import read_hf_config, shipped_config
    from zerosim.parallel import ParallelSpec
    from zerosim.parallel.data.multinode import DataMesh

    model = MetaGPT.from_config(read_hf_config(shipped_config("gpt2-small")), 32)
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for schedule in ("1f1b", "interleaved-1f1b"):
            cluster, engine = pipeline_run(model, DataMesh.of(1, 8, 4, pp=2), ParallelSpec(pp=2, pp_schedule=schedule),
                                           "adam", "bf16-mixed", (1, 32), 8)
            cluster.let_go()
            del cluster, engine
            gc.set_debug(gc.DEBUG_SAVEALL)
            assert gc.collect() == 0 and gc.garbage == [], schedule
            gc.set_debug(0)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()
