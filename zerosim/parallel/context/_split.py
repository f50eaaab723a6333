"""How a sequence is cut over the C ranks of a context-parallel group: contiguously, or in the load-balanced zigzag.

Letters: C the CP degree, L the sequence length, L_r = L / C the tokens a rank holds, p a rank's position in its CP
group. The sequence is cut into `pieces(split) · C` equal chunks; position p holds

    contiguous   chunk p                      (torch's ring without a load balancer; torchtitan's
                                               context_parallel_load_balancer = None)
    zigzag       chunks p and 2C − 1 − p,     (Transformer Engine 2.18, context_parallel.py: "Context parallelism
                 in that order                 assigns two discontiguous sequence chunks to each GPU for load
                                               balancing", get_seq_chunk_ids_for_reordering_before_attn and its
                                               THD get_batch_on_this_cp_rank; torch 2.13's _HeadTailLoadBalancer,
                                               the default of torchtitan's context_parallel_load_balancer =
                                               "headtail")

Why the zigzag balances causal attention: a chunk attends to its own keys and every earlier chunk's. Cut contiguously,
rank p's one chunk attends to p + 1 chunks (rank 0 to one, the last rank to C: the last does C times the work). In
the zigzag, rank p's chunks attend to p + 1 and 2C − p chunks (half as long): 2C + 1 on every rank.

What does not split is refused, as the frameworks refuse it (`check_length`): zigzag needs L divisible by 2C (torch
2.13, _load_balancer.py `_HeadTailLoadBalancer._generate_indices`: `if seq_length % (world_size * 2) != 0: raise
AssertionError`; torchtitan's ParallelDims.seq_len_divisor "Context Parallel requires that seq_len be divisible by
2 * CP degree, when load balancing is enabled"), contiguous L divisible by C (torch's ring takes every rank's K/V
to be its own shape: `_templated_ring_attention` reads the received buffer as `next_kv[: key.numel()].reshape(
key.shape)`, where DTensor's Shard would have cut an uneven L unevenly). Padding is what Transformer Engine does for
packed (THD) sequences only (`pad_thd_sequences_for_cp`): zerosim's batches are (B, L), so it refuses.
"""

from __future__ import annotations

import numpy as np

SPLITS = {"contiguous": 1, "zigzag": 2}  # split -> chunks a rank holds


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {tuple(SPLITS)} (how a sequence is cut over the CP ranks), got "
                         f"{split!r}")
    return split


def chunk_ids(split: str, cp: int, position: int) -> tuple:
    """The chunks (of SPLITS[split]·C) position p holds, in the order it holds them."""
    return (position,) if SPLITS[split] == 1 else (position, 2 * cp - 1 - position)


def check_length(length: int, split: str, cp: int, tp: int = 1) -> None:
    """Refuse a sequence length the split cannot cut into equal chunks (see the module docstring); beside sequence
    parallelism each rank's L/C tokens must also split over the T ranks of its TP group (torchtitan's
    seq_len_divisor = tp · cp · 2)."""
    multiple = SPLITS[check_split(split)] * cp * tp
    if length % multiple:
        rule = {("zigzag", 1): f"2 · cp = {2 * cp}", ("contiguous", 1): f"cp = {cp}"}.get(
            (split, tp), f"{SPLITS[split]} · cp · tp = {multiple}")
        fit = length - length % multiple
        raise ValueError(f"a sequence of {length} tokens does not split {split} over cp = {cp} ranks: its length must "
                         f"be a multiple of {rule} (torch's _HeadTailLoadBalancer and torchtitan's seq_len_divisor "
                         f"refuse it too; pad or cut it, e.g. to {fit or multiple} tokens)")


def positions(length: int, split: str, cp: int, position: int) -> np.ndarray:
    """(L_r,) int64: the sequence positions of position p's tokens, in the order it holds them."""
    check_length(length, split, cp)
    size = length // (SPLITS[split] * cp)
    return np.concatenate([np.arange(c * size, (c + 1) * size, dtype=np.int64)
                           for c in chunk_ids(split, cp, position)])


def shard(x, split: str, cp: int, position: int):
    """Position p's tokens of x (B, L, ...): the columns at `positions`, in its order (a copy)."""
    x = np.asarray(x)
    return np.ascontiguousarray(x[:, positions(x.shape[1], split, cp, position)])


def unshard(shards: list, split: str, axis: int = 1):
    """The whole sequence back from the C positions' shards along `axis` (the naive inverse of `shard`)."""
    cp = len(shards)
    length = shards[0].shape[axis] * cp
    out = np.empty(shards[0].shape[:axis] + (length,) + shards[0].shape[axis + 1:], shards[0].dtype)
    for p, s in enumerate(shards):
        index = [slice(None)] * out.ndim
        index[axis] = positions(length, split, cp, p)
        out[tuple(index)] = s
    return out
