"""analysis/planner/_strategy_sweep.py: where seed 003's crossover moves when the rings no longer span every rank.

GPT-3 175B in blocks, Φ = 1,812,099,072 (the largest unit), H100 (R = 989.4e12 FLOP/s fp16 dense: the roofline),
NVLink 4 inside a node (α 3.4 µs) and InfiniBand NDR across (β = 50e9 B/s per NIC, α = 14 µs: NCCL's Simple
figures), T = 20,480 tokens per rank, FSDP's schedule with one unit prefetched. FULL_SHARD's world ring over N/8
nodes costs, per call, 8.4 µs + (N − N/8)·3.4 µs + (N/8 − 1)·14 µs (NCCL's ring latency) and moves its bytes over a
node's 8 NICs (400 GB/s): its gathers stop hiding where that reaches the forward's slack 2ΦT/R − 2Φ/400e9 =
0.06596 s, N* ≈ 13,960. HSDP with S = G = 8 gathers and reduce-scatters inside the node (NVLink) and all-reduces a
2Φ/S piece over R = N/S nodes, one rank per node (one NIC): 2(R−1)α + 2(R−1)/R·2Φ/(Sβ) against backward's 4ΦT/R,
so N* = S(1 + (4ΦT/R − 4Φ/(Sβ))/(2α)).
"""

import pytest

from zerosim.analysis.costs import get_preset
from zerosim.analysis.planner import StrategyRow, fitting_shard_group, hsdp_bound_ranks, strategy_step
from zerosim.analysis.planner import strategy_crossover as crossover
from zerosim.analysis.timeline import Hardware
from zerosim.models.meta import MetaModel
from zerosim.parallel.data import CommSchedule

GPT3 = MetaModel.from_preset(get_preset("gpt3-175b"), unit="block")
HW = Hardware("h100", "nvlink4", "fp16", inter_link="ib_ndr")


def test_hsdp_moves_the_crossover_past_a_hundred_thousand_ranks():
    # 4ΦT/R = 4 · 1.812099072e9 · 20480 / 989.4e12 = 0.150036 s; 4Φ/(Sβ) = 7.248396e9 / 4e11 = 0.018121 s;
    # slack 0.131915 s over 2α = 2.8e-5 s: 4,711.3, plus 1, times S = 8: N* ≈ 37,698
    assert hsdp_bound_ranks(GPT3.largest_layer, 20480, HW, 8) == pytest.approx(37_698.45, abs=0.01)
    # T = 2048: 4ΦT/R = 0.0150 s < 4Φ/(Sβ) = 0.0181 s: the all-reduce's bytes alone outlast backward at any N
    assert hsdp_bound_ranks(GPT3.largest_layer, 2048, HW, 8) is None


@pytest.mark.slow  # eight meta steps of GPT-3 175B up to 16,384 ranks: ~10 s
def test_below_its_crossover_hsdp_stays_hidden_while_full_shard_surfaces():
    comm = CommSchedule.fsdp(forward_prefetch=True)
    sizes = (256, 1024, 4096, 16384)
    rows = {(s, n): strategy_step(GPT3, n, s, 8, g, comm=comm, tokens=20480)
            for s, g in (("hsdp", 8), ("full_shard", None)) for n in sizes}
    hsdp = [rows["hsdp", n].exposed for n in sizes]
    full = [rows["full_shard", n].exposed for n in sizes]
    # HSDP far below its N* ≈ 37,698: the replicas' all-reduce (its InfiniBand stream) hides behind backward at every
    # N; what is exposed (the step's first gather and last all-reduce) stays under 0.2 s
    assert max(hsdp) < 0.2
    # FULL_SHARD below its N* ≈ 13,960 hides as well (under 0.2 s up to 4096); past it, at 16,384, every call's
    # latency (77 ms a call against 66 ms of slack) lands on the step: seconds
    assert max(full[:3]) < 0.2 and full[3] > 10 * full[2]
    assert all(rows["hsdp", n].busy["intra-node"] > 0 for n in sizes)  # its gathers on NVLink


def test_crossover_and_the_fitting_shard_group():
    row = lambda n, exposed: StrategyRow("hsdp", n, 8, 2.0, 1.0, exposed, 0, 0.0, 0.0)  # noqa: E731
    assert crossover([row(64, 0.5), row(256, 1.5), row(128, 1.1)], "hsdp") == 128  # sorted by N, first over
    assert crossover([row(64, 0.5)], "hsdp") is None and crossover([row(64, 2.0)], "mics") is None
    # 18 bytes a parameter over S at most half of 80 GB: 18 · 174.6e9 / S <= 40e9 -> S >= 78.6: G·2^k = 128
    assert fitting_shard_group(174_604_259_328, 8) == 128
    assert fitting_shard_group(1_000_000, 8) == 8  # a small model: one node
