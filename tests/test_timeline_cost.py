"""The timeline's cost model against hand-derived tables: ring collectives (α-β), seed 001's all-reduce
numbers, device presets, the roofline and the optimizer step's bytes.

Letters: N ranks, α seconds per ring step, β bytes/s per direction, Ψ buffer bytes.
Ring time of one phase: (N−1)·α + (N−1)·(Ψ/N)/β; all-reduce: two phases.
"""

import pytest

from zerosim.analysis.costs import LINKS, Link
from zerosim.analysis.timeline import (
    A100_80GB_SXM,
    H100_SXM,
    Hardware,
    compute_time,
    get_device,
    get_link,
    optimizer_bytes_per_element,
    phase_time,
    ring_collective_time,
)
from zerosim.analysis.timeline._cost import equal_chunk_bytes
from zerosim.cluster import Call

MIB = 2**20
BIN = Link("binary", 2.0**30, 2.0**-17, "powers of two: every row below is exact in binary floating point")

# (collective, Ψ bytes, N, expected seconds); every number a power-of-two sum, so equality is exact.
RING_ROWS = [
    # all-reduce of 8 MiB over 4 ranks: 2 phases × 3 steps × (2^-17 + 2 MiB / 2^30 B/s) = 6·2^-17 + 6·2^-9
    ("all_reduce", 8 * MIB, 4, 6 * 2.0**-17 + 6 * 2.0**-9),
    # reduce-scatter alone: one phase, 3·2^-17 + 3·2^-9
    ("reduce_scatter", 8 * MIB, 4, 3 * 2.0**-17 + 3 * 2.0**-9),
    # all-gather moves what reduce-scatter moves, in the other direction of the data flow
    ("all_gather", 8 * MIB, 4, 3 * 2.0**-17 + 3 * 2.0**-9),
    # two ranks: one step per phase carrying half the buffer: 2·(2^-17 + 4 MiB / 2^30) = 2^-16 + 2^-7
    ("all_reduce", 8 * MIB, 2, 2.0**-16 + 2.0**-7),
    # one rank: nothing crosses a link, no step, no latency
    ("all_reduce", 8 * MIB, 1, 0.0),
    # 8 ranks, 1 MiB: 2·7·2^-17 + 2·7·(2^17 B / 2^30 B/s) = 14·2^-17 + 14·2^-13
    ("all_reduce", MIB, 8, 14 * 2.0**-17 + 14 * 2.0**-13),
]


@pytest.mark.parametrize("collective, size, n, expected", RING_ROWS)
def test_ring_collective_time_table(collective, size, n, expected):
    assert ring_collective_time(collective, size, n, BIN) == expected


SEED_REL = 1e-12  # each row is a handful of float64 operations, each within 2^-53 relative error

# Seed 001 §8: a 7B model's fp16 gradient (Ψ = 14e9 bytes) all-reduced within a node (NVLink 4, N = 8)
# and across nodes (InfiniBand NDR); α and the per-call base are NCCL's Ring + Simple figures (analysis/costs/_links.py,
# tuning.cc: NVLink 3.4 µs a step, network 14 µs, 8.4 µs a call). (link, N, expected seconds)
SEED_ROWS = [
    # NVLink 4 per direction, 8 GPUs: 8.4e-6 + 2·7·3.4e-6 + 2·(7/8)·14e9 / 450e9 = 56e-6 + 24.5e9/450e9
    #   = 0.000056 + 0.0544444… = 0.0545004… s: 54.5 ms, not the seed's 31 ms.
    ("nvlink4", 8, 8.4e-6 + 14 * 3.4e-6 + 24.5e9 / 450e9),
    # InfiniBand NDR per direction, 8 ranks: 8.4e-6 + 2·7·14e-6 + 24.5e9 / 50e9 = 0.0002044 + 0.49 s
    ("ib_ndr", 8, 8.4e-6 + 14 * 14e-6 + 0.49),
    # InfiniBand NDR, 1024 ranks: 8.4e-6 + 2·1023·14e-6 + 2·(1023/1024)·14e9/50e9 = 0.0286524 + 0.5594531… s
    ("ib_ndr", 1024, 8.4e-6 + 2046 * 14e-6 + 2 * 1023 * 14e9 / 1024 / 50e9),
]


@pytest.mark.parametrize("link, n, expected", SEED_ROWS)
def test_seed001_gradient_all_reduce(link, n, expected):
    assert ring_collective_time("all_reduce", 14e9, n, LINKS[link]) == pytest.approx(expected, rel=SEED_REL)


def test_how_seed001_gets_31_ms_and_560_ms():
    """The seed computes 2·Ψ/B: the ring's large-N limit 2(N−1)/N·Ψ/β with no latency. For NVLink it
    takes B = 900 GB/s, NVLink 4's *bidirectional* total (18 links × 50 GB/s); a ring rank sends
    one way only, at 450 GB/s, so the per-direction figure is twice the seed's. For InfiniBand NDR,
    50 GB/s (400 Gb/s) is already per direction, so the seed's 560 ms is the per-direction figure."""
    huge = 10**9  # (N−1)/N = 1 − 1e-9: the large-N limit to 1e-9
    limit = 1e-8  # relative distance to the limit: 1e-9 from (N−1)/N, plus rounding
    bidirectional = Link("NVLink 4 both ways", 900e9, 0.0, "")
    # 31.1 ms
    assert ring_collective_time("all_reduce", 14e9, huge, bidirectional) == pytest.approx(2 * 14 / 900, rel=limit)
    per_direction = Link("NVLink 4 one way", LINKS["nvlink4"].bandwidth, 0.0, "")
    # 62.2 ms
    assert ring_collective_time("all_reduce", 14e9, huge, per_direction) == pytest.approx(2 * 14 / 450, rel=limit)
    ib = Link("NDR one way", LINKS["ib_ndr"].bandwidth, 0.0, "")
    assert ring_collective_time("all_reduce", 14e9, huge, ib) == pytest.approx(0.56, rel=limit)  # the seed's 560 ms


def test_phase_time_is_steps_alpha_plus_busiest_bytes():
    # 5 ranks, 3 MiB sent by the busiest rank: 4·2^-17 + 3·2^20 / 2^30 = 2^-15 + 3·2^-10
    assert phase_time(5, 3 * MIB, BIN) == 2.0**-15 + 3 * 2.0**-10


# (collective, elements, N, dtype, expected bytes one rank sends) when the log gives no per-rank bytes
EQUAL_CHUNK_ROWS = [
    ("reduce_scatter", 8, 4, "fp16", 3 * 2 * 2),  # 3 steps × chunk of 2 elements × 2 bytes
    ("all_gather", 10, 4, "fp32", 3 * 3 * 4),  # ceil(10/4) = 3 elements per chunk (padded), 4 bytes each
    ("all_reduce", 6, 2, "bf16", 1 * 3 * 2),  # one phase of an all-reduce: 1 step × 3 elements × 2 bytes
    ("broadcast", 5, 4, "fp16", 5 * 2),  # a broadcast: the whole buffer, once
]


@pytest.mark.parametrize("collective, elements, n, dtype, expected", EQUAL_CHUNK_ROWS)
def test_equal_chunk_bytes(collective, elements, n, dtype, expected):
    assert equal_chunk_bytes(Call(0, collective, "sum", n, elements, dtype)) == expected


def test_ring_collective_rejects_unknown_collective_and_world():
    with pytest.raises(ValueError, match="unknown collective"):
        ring_collective_time("all_to_all", 8, 4, BIN)
    with pytest.raises(ValueError, match="world_size"):
        ring_collective_time("all_reduce", 8, 0, BIN)


# (device, format, dense peak FLOP/s as the vendor prints it)
RATE_ROWS = [
    (A100_80GB_SXM, "fp16", 312e12),  # A100 datasheet: FP16 Tensor Core 312 TF (624 "with sparsity")
    (A100_80GB_SXM, "bf16", 312e12),  # BF16 runs at the FP16 rate
    (A100_80GB_SXM, "fp32", 19.5e12),  # plain FP32 (no TF32)
    (A100_80GB_SXM, "fp64", 19.5e12),  # FP64 Tensor Core
    (A100_80GB_SXM, "fp8_e4m3", 312e12),  # no FP8 units on Ampere: fp8 runs at the 16-bit rate
    (H100_SXM, "fp16", 989.4e12),  # H100 whitepaper (SXM5): 989.4 dense; datasheet 1,979 "with sparsity"
    (H100_SXM, "fp32", 66.9e12),  # datasheet: 67
    (H100_SXM, "fp8_e5m2", 1978.9e12),  # FP8 Tensor Core dense; datasheet 3,958 "with sparsity"
]


@pytest.mark.parametrize("device, fmt, rate", RATE_ROWS)
def test_device_rates(device, fmt, rate):
    assert device.rate(fmt) == pytest.approx(rate, rel=1e-15)  # one multiplication by 1e12


def test_hbm_bandwidths():
    assert A100_80GB_SXM.hbm == 2039e9  # datasheet, 80GB SXM: 2,039 GB/s
    assert H100_SXM.hbm == 3.35e12  # datasheet, SXM: 3.35 TB/s


def test_roofline_picks_the_slower_of_flops_and_bytes():
    # 8 GFLOP at 2^40 FLOP/s... as powers of two: 2^33 FLOP / 2^43 FLOP/s = 2^-10 s; 2^20 B / 2^30 B/s = 2^-10 s
    assert compute_time(2**33, 2**20, 2.0**43, 2.0**30) == 2.0**-10  # balanced: both give 2^-10
    assert compute_time(2**34, 2**20, 2.0**43, 2.0**30) == 2.0**-9  # twice the FLOPs: compute-bound
    assert compute_time(2**33, 2**22, 2.0**43, 2.0**30) == 2.0**-8  # four times the bytes: memory-bound


# (state buffers, gradient bytes, param bytes, expected read + written bytes per element)
OPTIMIZER_ROWS = [
    # Adam, fp16 grads and params: cast 2 → 4; update reads w, g, m, v (16) writes w, m, v (12); round 4 → 2
    (2, 2, 2, (2 + 16 + 4) + (4 + 12 + 2)),  # 40
    # SGD with momentum / Lion (one state), fp16: read 2 + 12 + 4, write 4 + 8 + 2
    (1, 2, 2, 18 + 14),
    # Adam with gradients reduced in fp32 (4 bytes on the wire), bf16 params: read 4 + 16 + 4, write 4 + 12 + 2
    (2, 4, 2, 24 + 18),
    # Adan (four states), fp16: read 2 + 24 + 4, write 4 + 20 + 2
    (4, 2, 2, 30 + 26),
]


@pytest.mark.parametrize("states, grad_bytes, param_bytes, expected", OPTIMIZER_ROWS)
def test_optimizer_bytes_per_element(states, grad_bytes, param_bytes, expected):
    assert optimizer_bytes_per_element(states, grad_bytes, param_bytes) == expected


def test_unknown_device_link_and_format_are_refused():
    with pytest.raises(ValueError, match="unknown device"):
        get_device("k80")
    with pytest.raises(ValueError, match="unknown link"):
        get_link("nvlink9")
    with pytest.raises(ValueError, match="unknown floating-point format"):
        Hardware(compute="fp12")


def test_hardware_resolves_names():
    hw = Hardware("a100", "ib_ndr", "bf16")
    assert hw.device is A100_80GB_SXM and hw.link is LINKS["ib_ndr"] and hw.compute == "bf16"


@pytest.mark.parametrize("gpu, link", [
    ("a100-40gb", "NVLink 3"),  # the A100 datasheet: 600 GB/s bidirectional
    ("a100-80gb", "NVLink 3"),
    ("h100-80gb", "NVLink 4"),  # 900 GB/s
    ("h200", "NVLink 4"),
    ("v100-32gb", "NVLink 2"),  # the V100 datasheet: 300 GB/s (the DGX-2's NVSwitch)
    ("rtx3090", "PCIe 4.0 x16"),  # no NVSwitch: a box of RTX 3090s rings over its PCIe 4.0 (the GA102 whitepaper)
])
def test_every_command_rings_a_node_over_the_gpus_own_link(gpu, link):
    # the A100's NVLink 3 (600 GB/s bidirectional, the A100 datasheet) was plan's default alone: timeline, its
    # strategy sweep and the explorer rang an A100's node over NVLink 4 (900 GB/s). One fact now: Device.link. The
    # V100 and the RTX 3090 rang over NVLink 4 until 2026-11-28 (3× and 14× their own links)
    import json

    from helpers import run_cli

    from zerosim.analysis.costs import get_gpu
    from zerosim.analysis.timeline import Hardware

    assert Hardware(get_gpu(gpu).device).link.name == link
    code, out, _ = run_cli("timeline", "--model", "gpt2-small", "--ranks", "8", "--gpu", gpu, "--json")
    assert code == 0 and json.loads(out)["link"] == link
    code, out, _ = run_cli("plan", "--model", "gpt2-small", "--gpus", "8", "--gpu", gpu, "--seq-len", "128",
                           "--global-batch", "8", "--stages", "3", "--strategies", "none", "--json")
    key = {"PCIe 4.0 x16": "pcie4"}.get(link, link.lower().replace(" ", ""))
    assert code == 0 and f"--link {key}" in json.loads(out)["reproduce"][1]


@pytest.mark.parametrize("gpu, bf16", [
    ("v100-32gb", False),  # Volta: the V100 datasheet's Tensor Performance is fp16 alone
    ("rtx3090", True),  # Ampere GA102: the whitepaper's Peak BF16 Tensor TFLOPS
    ("a100-40gb", True),
    ("a100-80gb", True),  # the A100 datasheet's BF16 Tensor Core 312 TF
    ("h100-80gb", True),
    ("h100-hbm2e", True),
    ("h200", True),
])
def test_a_bf16_step_is_timed_only_on_a_gpu_with_bf16_units(gpu, bf16):
    # a V100's bf16 step was charged at its fp16 tensor-core rate (125 TF), which no V100 reaches in bf16; and plan's
    # default precision, bf16-mixed, planned every V100 job in it
    import json

    from helpers import run_cli

    from zerosim.analysis.costs import get_gpu
    from zerosim.analysis.timeline import Hardware

    device = get_gpu(gpu).device
    assert Hardware(device, compute="fp16").device.rate("fp16") > 0
    code, out, err = run_cli("timeline", "--model", "gpt2-small", "--ranks", "8", "--gpu", gpu, "--precision",
                             "bf16-mixed", "--json")
    code_plan, plan_out, _ = run_cli("plan", "--model", "gpt2-small", "--gpus", "8", "--gpu", gpu, "--seq-len", "128",
                                     "--global-batch", "8", "--stages", "3", "--strategies", "none", "--json")
    assert code_plan == 0
    if bf16:
        assert code == 0 and Hardware(device, compute="bf16").compute == "bf16"
        assert json.loads(plan_out)["settings"]["precision"] == "bf16-mixed"
    else:
        with pytest.raises(ValueError, match="the Tesla V100 SXM2 has no bf16 units"):
            Hardware(device, compute="bf16")
        assert code == 2 and out == "" and "has no bf16 units" in err and "--precision" in err
        assert json.loads(plan_out)["settings"]["precision"] == "fp16-mixed"  # plan's default, a V100's format
