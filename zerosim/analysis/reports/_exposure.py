"""Why each kind of communication is exposed or hidden: the words `zerosim timeline` prints beside each purpose's
exposed seconds (its `--json` "exposure"), from the schedule the step ran.

The seconds are the timeline's (analysis/timeline `comm_by_purpose`: the part of each call its rank's compute did not
cover); these lines say which rule of the schedule put them there:

    gather params     FSDP (torch/distributed/fsdp, BackwardPrefetch): forward gathers a unit right before its use
                      unless forward_prefetch; backward prefetches `backward_prefetch` units ahead. With tensor
                      parallelism a block's five units are one FSDP unit, as torchtitan's apply_fsdp wraps each
                      TransformerBlock with TP inside (torchtitan a33d0e3, torchtitan/models/llama3/infra/
                      parallelize.py `apply_fsdp`), so the next block is gathered while this one computes.
                      DeepSpeed (partitioned_param_coordinator.py): prefetched from the trace up to
                      stage3_prefetch_bucket_size elements. seed 004: gathered right before each use.
    reduce grads      a unit's gradients reduce-scatter once its backward is done: hidden behind the backward of
                      the units before it; the first units' (the last computed) wait at the step's end.
    tensor parallel   Megatron's f and g and torch's DTensor redistributes: the next GEMM needs the collective's
                      output, so it is on the critical path (Megatron without --tp-comm-overlap, torchtitan without
                      async TP). With async TP (torchtitan's enable_async_tensor_parallel: torch's micro-pipelined
                      `_fused_all_gather_matmul` / `_fused_matmul_reduce_scatter`, torch/distributed/
                      _symmetric_memory/__init__.py at torch 2.13.0) zerosim's bound lets no compute wait for them.
    replicate grads   HSDP's / MiCS's all-reduce over the replicas after each reduce-scatter, as the reduce-scatter.
    refresh params    stages 1 and 2 all-gather the updated shards after the optimizer step: nothing is left to hide
                      it behind.
    optimizer, check  Muon's matrices brought together, the overflow flag and the norm: the update waits for them.
    context parallel  ring: hop j + 1's K/V travel while hop j's block of attention computes (Transformer Engine 2.18,
                      context_parallel.py `AttnFuncWithCPAndKVP2P.forward`: step i waits for the K/V posted at step
                      i − 1, posts step i + 1's, then attends), and backward each hop's [kv, dkv] message beside its
                      flash backward (`.backward`: "wait until dKV is received" only before the dkv correction); on
                      the CP group's own communicator, beside data parallelism's. Exposed where a message outlasts
                      the block it hides behind (a causal diagonal block is half the work, a skipped one none) and
                      before the first hop. allgather (`AttnFuncWithCPAndKVAllGather`): K and V all-gathered
                      (`gather_along_first_dim`, a synchronous call) before the attention that reads them and dK, dV
                      reduce-scattered after it: nothing to hide behind.
"""

from __future__ import annotations

GATHER = {  # (prefetch by units?, forward prefetch?) -> why the parameter gathers are exposed or hidden
    "fsdp": "FSDP: backward prefetches the next unit while this one computes; forward gathers each unit right "
            "before its use (forward_prefetch off), so those gathers are exposed",
    "fsdp-forward": "FSDP: the next unit prefetched in forward and backward, while this one computes",
    "deepspeed": "DeepSpeed: prefetched from the trace of upcoming uses, up to stage3_prefetch_bucket_size elements",
    "seed": "seed 004's schedule: gathered right before each use, nothing prefetched: all exposed",
}
REASONS = {
    "reduce grads": "issued as each unit's backward ends: hidden behind the backward before it; the last ones wait "
                    "at the step's end",
    "replicate grads": "the replicas' all-reduce of each reduced shard (HSDP, MiCS), issued after its reduce-scatter: "
                       "hidden behind the backward before it, the last ones at the step's end",
    "optimizer": "the optimizer's own collectives (Muon's whole matrices) between the backward and the update: "
                 "nothing left to hide them behind",
    "check": "a few bytes of agreement (the overflow flag, the gradient norm) the update waits for",
    "refresh params": "after the optimizer step: nothing left to hide it behind",
    "tensor parallel": "on the critical path: the next GEMM needs its output (Megatron without --tp-comm-overlap, "
                       "torchtitan without async TP)",
}
ASYNC_TP = ("async TP (torch's micro-pipelined all-gather / reduce-scatter matmuls) as a bound: no compute waits for "
            "it; what shows as exposed ran while compute waited for something else")
TP_UNIT = "; beside TP a block's five units are one FSDP unit (torchtitan's fully_shard per TransformerBlock)"
CONTEXT = {  # --cp-style -> why context parallelism's calls are exposed or hidden
    "ring": "the next hop's K/V travel while this hop's block of attention computes, and backward each hop's "
            "K/V and dK/dV beside its attention backward (Transformer Engine's AttnFuncWithCPAndKVP2P), on the CP "
            "group's own stream: exposed where a message outlasts its block (a causal diagonal block is half the "
            "work, a skipped one none) and before the first hop",
    "allgather": "K and V all-gathered before the attention that reads them (forward, recompute, backward) and dK, "
                 "dV reduce-scattered after it (Transformer Engine's AttnFuncWithCPAndKVAllGather, synchronous "
                 "calls): nothing to hide behind, all exposed",
    "torch": "K and V all-gathered once at the first step (forward, recompute, backward), hidden behind the first "
             "step's block of attention, and backward each step's fp32 dK, dV sum sent on beside the next step's "
             "attention (torch's context_parallel: _AllGatherRotater, _AllToAllRotater): exposed where the "
             "all-gather outlasts the first block (a causal diagonal one, half the work) or a sum its step",
}


def exposure(comm, tp: int = 1, async_tp: bool = False, cp_style: str | None = None) -> dict:
    """{purpose: why} for a step run with CommSchedule `comm` beside tensor parallelism of degree `tp` (and context
    parallelism of `cp_style`, or None without it)."""
    if comm.prefetch_bucket_size:
        gather = GATHER["deepspeed"]
    elif comm.prefetch_forward or comm.prefetch_backward:
        gather = GATHER["fsdp-forward" if comm.prefetch_forward else "fsdp"] + (TP_UNIT if tp > 1 else "")
    else:
        gather = GATHER["seed"]
    out = {"gather params": gather, **REASONS}
    if async_tp:
        out["tensor parallel"] = ASYNC_TP
    if cp_style is not None:
        out["context parallel"] = CONTEXT[cp_style]
    return out
