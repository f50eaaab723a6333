"""Link latencies as NCCL's tuning model charges them (costs/_links.py), and a ring that crosses nodes (_cost.py).

The constants are NCCL v2.29.7-1's, src/graph/tuning.cc, `ncclTunerConstantsDefaults` (Ring rows), and
src/graph/topo.h's NVLink bandwidths: copied by hand here, row by row, from that file.
"""

import pytest

from zerosim.analysis.costs._comm import LINKS
from zerosim.analysis.costs._links import BASE_LATENCY_US, NVLINK_GB_PER_LINK, STEP_LATENCY_US, ring_latency
from zerosim.analysis.timeline._cost import phase_time

US = 1e-6


def test_nccls_ring_constants():
    assert BASE_LATENCY_US == {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}  # baseLatencies, "{ 6.6, 14.0, 8.4 } Ring"
    assert STEP_LATENCY_US == {
        "nvlink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},  # hwLatencies NVLINK, Ring "{ .6, 1.9, 3.4 }"
        "pci": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},  # PCI, Ring "{ 1.0, 2.5, 5.7 }"
        "net": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},  # NET, Ring "{ 2.7, 4.0, 14.0 }"
    }
    assert NVLINK_GB_PER_LINK == {"sm80": 20.0, "sm90": 20.6}  # SM80_NVLINK_BW, SM90_NVLINK_BW


# (preset, bandwidth B/s per direction, α: NCCL's Simple step over its hardware, base per call)
PRESETS = [
    ("nvlink4", 450e9, 3.4 * US),  # 18 links × 25 GB/s each way (the H100 datasheet's 900 GB/s both ways)
    ("nvlink3", 300e9, 3.4 * US),  # 12 links × 25 GB/s each way (the A100 datasheet's 600 GB/s)
    ("nvlink2", 150e9, 3.4 * US),  # 6 links × 25 GB/s each way (the V100 datasheet's 300 GB/s)
    ("pcie5", 64e9, 5.7 * US),  # 32 GT/s × 16 lanes × 128/130 ÷ 8 ≈ 63 (seed 001's 64); NCCL's PCI figure
    ("pcie4", 31.5e9, 5.7 * US),  # 16 GT/s: half of PCIe 5 (the RTX 3090's ring, the A100's host copies)
    ("pcie3", 15.75e9, 5.7 * US),  # 8 GT/s × 16 × 128/130 ÷ 8 (the V100's host copies)
    ("ib_ndr", 50e9, 14 * US),  # 400 Gb/s per NIC; NCCL's network figure
    ("ib_hdr", 25e9, 14 * US),  # 200 Gb/s per NIC
    ("100gbe", 12.5e9, 14 * US),
]


@pytest.mark.parametrize("key, bandwidth, alpha", PRESETS)
def test_link_presets(key, bandwidth, alpha):
    link = LINKS[key]
    assert (link.bandwidth, link.alpha, link.base) == (bandwidth, alpha, 8.4 * US)


def test_ring_latency_charges_crossings_at_the_networks_step():
    # an all-gather over 16 ranks on 2 nodes: 15 steps, 1 of them between the nodes (nNodes − 1)
    assert ring_latency(15, 1, 3.4 * US, 14 * US, 8.4 * US) == pytest.approx((8.4 + 14 * 3.4 + 14) * US, rel=1e-15)
    with pytest.raises(ValueError, match="cannot cross nodes"):
        ring_latency(3, 4, 1.0, 1.0, 0.0)


def test_a_ring_over_nodes_moves_its_bytes_over_the_nodes_nics():
    """16 ranks on 2 nodes of 8, 1 GB sent by the busiest rank: base + 14·α_nv + 1·α_ib + bytes / min(β_nv, 8·β_ib)
    (400 GB/s: NCCL spreads the ring's channels over the node's NICs); with one rank a node (a replicas' ring,
    nics = 1), the bytes go over one NIC."""
    nv, ib = LINKS["nvlink4"], LINKS["ib_ndr"]
    got = phase_time(16, 1e9, nv, inter=ib, nodes=2, nics=8)
    assert got == pytest.approx((8.4 + 14 * 3.4 + 14) * US + 1e9 / 400e9, rel=1e-12)
    assert phase_time(2, 1e9, nv, inter=ib, nodes=2, nics=1) == pytest.approx((8.4 + 14) * US + 1e9 / 50e9, rel=1e-12)
    # the NICs never make it faster than NVLink: 16 NICs of 50 GB/s are capped at 450
    assert phase_time(32, 0.0, nv, inter=ib, nodes=2, nics=16) + 1e9 / 450e9 == pytest.approx(
        phase_time(32, 1e9, nv, inter=ib, nodes=2, nics=16), rel=1e-12)
    assert phase_time(16, 1e9, nv, base=False) == pytest.approx(15 * 3.4 * US + 1e9 / 450e9, rel=1e-12)
