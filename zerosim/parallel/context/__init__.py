"""Context parallelism beside ZeRO: each rank holds 1/C of every sequence, and attention's keys and values travel the
CP group — round a ring hop by hop, each hop's block of attention merged by the online softmax with the roundings
Transformer Engine's kernels make, or all-gathered once (Llama 3's), or as torch's own context_parallel runs it
(all-gathered, then merged step by step in fp32) — composed with every flat ZeRO stage, which
reduces and shards the gradients over dp × cp as torchtitan's FSDP does.

    from zerosim.parallel.context import ContextParallel
    cp = ContextParallel(gpt, cp=2, style="ring", split="zigzag")   # gpt: a zerosim GPT or Llama, attention="flash"
    engine = ZeroEngine(cp.model, Cluster(4), 3, Adam(), "bf16-mixed", parallelisms=(cp,))
    engine.step(cp.batches(engine.dims, per_data_rank))             # each rank its tokens of its dp rank's batch

Its files, the algorithm apart from its communication:

    _parallelism.py   ContextParallel: the step's points (the contract), each rank's tokens
    _communication.py the K/V's sends round the ring, the all-gather and its reduce-scatter, on the records
    _split.py         how a sequence is cut over the CP ranks (contiguous, zigzag); what does not split is refused
    _blocks.py        the ring's schedule as data: which block of attention each hop computes, and the all-gather's;
                      what each block costs (its query-key pairs), the busiest position
    _model.py         ContextParallelModel: the GPT's or Llama's units, attention cut where the ring communicates
    _ends.py          the QKV end before the ring and the output end after it (the GPT's, the Llama's, TP's halves)
    _core.py          a hop of ring attention, and the all-gather's core: the arithmetic between the sends
    _torch_core.py    a step of torch's own ring (its fp32 merges and sums), and the order it runs them in
    _records.py       what crosses between the units: Located (a value beside its positions), Ring, RingGrad
    _attend.py        ring_attention: the core alone, each rank's Q, K, V in, O and LSE out
    _meta.py          the data-less twin of a CP rank's model, for the meta backend

The oracle is zerosim.reference's ContextReference (its own plain ring attention); the merge's arithmetic is
models/layers/_attention_merge.py.

Beside tensor parallelism `ContextParallel(gpt, cp=C, tensor=tp)` cuts TP's attention region into its column and row
halves; `cp.parallelisms` is (tp, cp), TP's operators first. With TP's sequence parallelism each rank's L / C tokens are
cut again over its TP group (L / (C·T) for the norms and the residual stream), the halves' operators SP's all-gather and
reduce-scatter, as Megatron-Core cuts the sequence over CP first (core_v0.19.0 pretrain_gpt.py `get_batch`:
megatron/core/utils.py `get_batch_on_this_cp_rank`) and scatters each CP rank's part over TP after the embedding
(language_model_embedding.py `LanguageModelEmbedding.forward`: `scatter_to_sequence_parallel_region`). Pipeline
parallelism composes at the same points (parallel/_contract.py): a stage must hold a block's CP units whole (its QKV
end, its hops, its output end: a cut between them would cross the ring's state), its CP groups are `ParallelDims(...,
pp=P, cp=C).groups("cp")` within the stage, and the flat stages' "fsdp" groups are cut per stage.
"""

from zerosim.parallel.context._attend import ring_attention
from zerosim.parallel.context._blocks import (
    Block,
    Reach,
    block_shapes,
    block_work,
    busiest_position,
    gathered_reach,
    ring_block,
    ring_schedule,
)
from zerosim.parallel.context._model import STYLES, ContextParallelModel, check_options
from zerosim.parallel.context._parallelism import ContextParallel
from zerosim.parallel.context._records import Located, Ring, RingGrad
from zerosim.parallel.context._split import SPLITS, check_length, chunk_ids, positions, shard, unshard
from zerosim.parallel.context._torch_core import step_of

__all__ = ["Block", "ContextParallel", "ContextParallelModel", "Located", "Reach", "Ring", "RingGrad", "SPLITS",
           "STYLES", "block_shapes", "block_work", "busiest_position", "check_length", "check_options", "chunk_ids",
           "gathered_reach", "positions", "ring_attention", "ring_block", "ring_schedule", "shard", "step_of",
           "unshard"]
