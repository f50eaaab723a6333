"""Muon's optimizer state beside AdamW's, parameter group by group as DeepSpeed holds it; DeepSpeed's published
AdamW-vs-Muon figure, and how much of it the optimizer state explains.

Letters: P parameters, P_M of them on Muon (2-D hidden matrices: MuonAdamW.is_matrix, DeepSpeed 0.19.5
`set_optimizer_flags`), N ranks. At ZeRO stages 1-3 DeepSpeed flattens and partitions each parameter group on its
own, so the AdamW group keeps m and v (8 bytes) and the Muon group one momentum (4 bytes, "Memory per Parameter" in
blogs/muon-optimizer/README.md) per parameter:

    AdamW      8·P / N
    Muon       (4·P_M + 8·(P − P_M)) / N            saving 4·P_M / N

(zerosim's own ledgers hold MuonAdamW's "v" over the whole region, 8·P/N: optim/_muon.py says why.)

DeepSpeed's figure (blogs/muon-optimizer/README.md, DeepSpeed v0.19.3+, "Measured GPU Memory: Qwen2.5-3B
Finetuning"): peak memory per GPU 34.5 GiB with AdamW, 31.4 GiB with Muon, on 8 x A100 40GB, batch size 32,
ZeRO stage 2, bf16. Not stated: sequence length, micro-batch per GPU and accumulation, activation checkpointing,
which AdamW kernel, the allocator's reserve, whether the peak is torch's max_memory_allocated or reserved.
"""

from __future__ import annotations

from zerosim._dataclass import dataclass

GIB = 2**30
DEEPSPEED_FIGURE = {"model": "Qwen2.5-3B", "gpus": 8, "stage": 2, "precision": "bf16", "batch": 32,
                    "adamw_gib": 34.5, "muon_gib": 31.4}  # blogs/muon-optimizer/README.md


@dataclass(frozen=True)
class MuonStateBytes:
    """Optimizer-state bytes per rank of one model on N ranks at ZeRO 1-3, AdamW beside Muon + AdamW."""

    params: int  # P
    muon_params: int  # P_M
    ranks: int  # N

    @property
    def adamw(self) -> float:
        return 8 * self.params / self.ranks

    @property
    def muon(self) -> float:
        return (4 * self.muon_params + 8 * (self.params - self.muon_params)) / self.ranks

    @property
    def saving(self) -> float:
        return self.adamw - self.muon


def muon_state_bytes(model, ranks: int, optimizer=None) -> MuonStateBytes:
    """`MuonStateBytes` of `model` (its `specs`) on `ranks`, split by `optimizer`'s `is_matrix` (MuonAdamW's)."""
    if optimizer is None:
        from zerosim.optim import MuonAdamW

        optimizer = MuonAdamW()
    muon = sum(s.size for s in model.specs if optimizer.is_matrix(s.name, s.shape))
    return MuonStateBytes(model.num_params, muon, ranks)
