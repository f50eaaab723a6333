"""Tensor parallelism's collectives: Megatron's conjugate operators f and g on the TP groups of the mesh, and the
vocabulary-parallel loss's all-reduces.

Letters: B batch, L sequence length, d width, T the TP degree (the ring's length: a TP group is T consecutive ranks
on one node, `ParallelDims.groups("tp")`). Megatron-LM core_v0.19.0, megatron/core/tensor_parallel/mappings.py:

    operator (autograd Function)                       forward                   backward
    copy_to_tensor_model_parallel_region       (f)     identity                  all-reduce
    reduce_from_tensor_model_parallel_region   (g)     all-reduce                identity
    gather_from_sequence_parallel_region       (f, SP) all-gather along L        reduce-scatter along L
    reduce_scatter_to_sequence_parallel_region (g, SP) reduce-scatter along L    all-gather along L
    scatter_to_sequence_parallel_region                keep the rank's L/T       all-gather along L

`CONJUGATES` writes that table as data; `run` does one side of one operator on every local rank's tensor. Sums run
on zerosim's ring over the TP group (collectives/_calls.py: chunk c summed from position c+1 round to c, each hop
rounded to the wire format, which is the tensor's own: NCCL reduces bf16 in bf16). NOTE: NCCL's own all-reduce cuts
the buffer into aligned per-loop chunks (collectives/chunk_maps/_nccl.py), so on GPUs which rank finishes which
element's sum, and so its rounding, differs; the oracle (reference/_tensor.py) follows zerosim's ring.

"Along L": Megatron's activations are [s, b, h], so its first-dim collectives cut the sequence. zerosim's are
(B, L, d): they travel sequence-major (`sequence_major`), so rank r's chunk is tokens [r·L/T, (r+1)·L/T) of every
sequence, as Megatron's; L must split evenly over T (Megatron asserts "First dimension of the tensor should be
divisible by tensor parallel size").
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.cluster import Handle
from zerosim.collectives import all_gather, all_reduce, reduce_scatter
from zerosim.models.meta import like


@dataclass(frozen=True)
class Conjugate:
    """One of Megatron's region operators: the collective its forward runs and the one its backward runs."""

    name: str
    forward: str  # a key of SIDES
    backward: str


CONJUGATES = {c.name: c for c in (
    Conjugate("copy_to_tensor_model_parallel_region", "identity", "all-reduce"),
    Conjugate("reduce_from_tensor_model_parallel_region", "all-reduce", "identity"),
    Conjugate("gather_from_sequence_parallel_region", "all-gather", "reduce-scatter"),
    Conjugate("reduce_scatter_to_sequence_parallel_region", "reduce-scatter", "all-gather"),
    Conjugate("scatter_to_sequence_parallel_region", "split", "all-gather"),
)}


PURPOSE = "tensor parallel"  # every TP call's purpose in the trace (TensorParallel's name)
SP_GRADS = "sequence-parallel grads"  # the tag of the one TP call a step makes after its micro-steps (SP's grads)


def _meta(x) -> bool:
    return getattr(x, "is_meta", False)


def sequence_major(x):
    """(B, L, d) -> (L·B·d,): Megatron's [s, b, h] order, so a ring's chunk r is a block of whole positions."""
    return x.reshape(-1) if _meta(x) else np.ascontiguousarray(np.swapaxes(x, 0, 1)).reshape(-1)


def from_sequence_major(flat, B: int, L: int, d: int):
    """(L·B·d,) sequence-major -> (B, L, d)."""
    return flat.reshape(B, L, d) if _meta(flat) else np.ascontiguousarray(np.swapaxes(flat.reshape(L, B, d), 0, 1))


def sequence_shard(x, position: int, tp: int):
    """(B, L, d) -> the (B, L/T, d) tokens of TP position `position`."""
    B, L, d = x.shape
    if L % tp:
        raise ValueError(f"sequence parallelism cuts the {L} positions of a sequence over tp = {tp} ranks: L must "
                         "be a multiple of tp (Megatron asserts the same)")
    step = L // tp
    return like(x, (B, step, d), x.dtype) if _meta(x) else x[:, position * step:(position + 1) * step].copy()


def _all_reduce(cluster, group, xs, tag):
    out = all_reduce(cluster, list(xs), tag=tag, group=group)
    return list(out), out.handle


def _all_gather(cluster, group, shards, tag):
    B, Ls, d = shards[0].shape
    out = all_gather(cluster, [sequence_major(s) for s in shards], tag=tag, group=group)
    return [from_sequence_major(f, B, Ls * group.size, d) for f in out], out.handle


def _reduce_scatter(cluster, group, xs, tag):
    B, L, d = xs[0].shape
    if L % group.size:
        raise ValueError(f"sequence parallelism reduce-scatters the {L} positions of a sequence over tp = "
                         f"{group.size} ranks: L must be a multiple of tp (Megatron asserts the same)")
    out = reduce_scatter(cluster, [sequence_major(x) for x in xs], tag=tag, group=group)
    return [from_sequence_major(s, B, L // group.size, d) for s in out], out.handle


def _split(cluster, group, xs, tag):
    return [sequence_shard(x, group.position(r.index), group.size) for x, r in zip(xs, cluster.ranks)], Handle()


SIDES = {  # what one side of an operator does to every local rank's tensor: (new tensors, handle)
    "identity": lambda cluster, group, xs, tag: (list(xs), Handle()),
    "all-reduce": _all_reduce,
    "all-gather": _all_gather,
    "reduce-scatter": _reduce_scatter,
    "split": _split,
}


def run_side(side: str, cluster, group, xs: list, tag: str) -> tuple:
    """One side ("identity", "all-reduce", ...) over the TP `group` on every local rank's tensor (B, L, d):
    (their results, the handle of the calls it made)."""
    with cluster.trace.about(purpose=PURPOSE):
        return SIDES[side](cluster, group, xs, tag)


def all_reduce_statistic(cluster, group, xs: list, op: str, tag: str) -> tuple:
    """The vocabulary-parallel loss's all-reduce of (M,) fp32 statistics ("max" or "sum") over the TP group."""
    with cluster.trace.about(purpose=PURPOSE):
        out = all_reduce(cluster, list(xs), op=op, tag=tag, group=group)
    return list(out), out.handle


def all_reduce_sequence_parallel_grads(cluster, group, xs: list, tag: str) -> tuple:
    """The sum over the TP group of the gradients each rank made on its sequence shard (norms, row-parallel biases):
    Megatron's `_allreduce_non_tensor_model_parallel_grads` (core/distributed/finalize_model_grads.py)."""
    with cluster.trace.about(purpose=PURPOSE):
        out = all_reduce(cluster, list(xs), tag=tag, group=group)
    return list(out), out.handle


def fp8_wire(call) -> bool:
    """Whether `call` (a trace Call) is one of the TP all-gathers that fp8 linears carry in float8: the sequence-
    parallel all-gathers of a block's column-parallel input (forward, and Megatron's again in backward) and of a
    row-parallel output's gradient (backward). torchao's Float8 TP styles cast before they redistribute
    (torchao 0.18.0, torchao/float8/float8_tensor_parallel.py: `Float8ColwiseParallel._prepare_input_fn` and
    `PrepareFloat8ModuleInput`: "the float8 cast happens before the all-gather"; `NoopFwToFloat8BwDynamic` casts the
    output's gradient before the Shard -> Replicate all-gather backward); Transformer Engine quantizes first too
    (2.18: module/linear.py `gather_along_first_dim(inputmat, tp_group, quantizer=...)`, module/base.py
    `grad_output_preprocess`). The reduce-scatters and all-reduces sum partial outputs in 16 bits in both."""
    return (call.purpose == PURPOSE and call.collective == "all_gather"
            and call.tag.split(".", 1)[0].startswith("block"))
