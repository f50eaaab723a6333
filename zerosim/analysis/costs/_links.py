"""Latency of a ring collective as NCCL's own cost model charges it: a base latency per call, then one per ring step.

Letters: n ranks on the ring, m nodes it spans, α_intra / α_inter seconds per ring step inside / between nodes.

NCCL picks an algorithm and protocol per call from a cost model of its own (NCCL v2.29.7-1, src/graph/tuning.cc,
`ncclTopoTuneModel` with the constants `ncclTunerConstantsDefaults`, identical at v2.30.7-1, the release
docs/frameworks.md reads, row nccl-tuning; `ncclTopoGetAlgoTime` then charges `lat + bytes / bw`). For the ring
algorithm and an all-gather or reduce-scatter (nsteps = n − 1) that latency is

    baseLatencies[Ring][proto] + (nsteps − nInterSteps)·hwLatencies[intra][Ring][proto]
                               + nInterSteps·hwLatencies[NET][Ring][proto],     nInterSteps = m − 1

(an all-reduce runs 2(n − 1) steps, 2(m − 1) of them between nodes). The constants, in µs (Ring row):

    protocol   base   NVLink step   PCI step   network step
    LL          6.6      0.6           1.0         2.7
    LL128      14.0      1.9           2.5         4.0
    Simple      8.4      3.4           5.7        14.0

Large messages (a ZeRO unit's gather, a bucket's reduce-scatter: megabytes) run the Simple protocol, NCCL's pick
past a few hundred kilobytes, so the link presets (_comm.py LINKS) take the Simple column: α = 3.4 µs
on NVLink, 5.7 µs on PCIe, 14 µs on a network, and 8.4 µs per call. What is left out: NCCL adds a network
"overhead" to every intra-node step of a ring that leaves the node (`getNetOverhead`: 1 µs on Intel CPUs, 2 µs on
AMD, times 3 for Simple), the graph's own `latencyInter`, the 1.4x "plateau" factor on multi-node Simple
all-reduces, and its tree, NVLS, CollNet and PAT algorithms, which a ring model does not run.

Bandwidths stay the links' datasheet figures per direction (NVLink 4: 450 GB/s; NDR: 50 GB/s). NCCL's own model
of a GPU's NVLink bandwidth is lower: 20.6 GB/s per NVLink on sm_90 (src/graph/topo.h, SM90_NVLINK_BW), 18 links =
370.8 GB/s per H100, and 20.0 per link on sm_80 (12 links = 240 GB/s per A100): give it with --link-bandwidth.
"""

from __future__ import annotations

NCCL_RELEASE = "v2.29.7-1"  # the tag src/graph/tuning.cc and src/graph/topo.h were read at
PROTOCOLS = ("LL", "LL128", "Simple")
US = 1e-6

# ncclTunerConstantsDefaults.baseLatencies, the Ring row: µs charged once per call
BASE_LATENCY_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
# ncclTunerConstantsDefaults.hwLatencies[hw][Ring][protocol]: µs per ring step over that hardware
STEP_LATENCY_US = {
    "nvlink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
    "pci": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
    "net": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
}
# src/graph/topo.h: GB/s NCCL assumes per NVLink, by compute capability (SM80_NVLINK_BW, SM90_NVLINK_BW)
NVLINK_GB_PER_LINK = {"sm80": 20.0, "sm90": 20.6}


def step_latency(hw: str, protocol: str = "Simple") -> float:
    """Seconds NCCL charges per ring step over `hw` ("nvlink", "pci", "net") with `protocol`."""
    return STEP_LATENCY_US[hw][protocol] * US


def base_latency(protocol: str = "Simple") -> float:
    """Seconds NCCL charges once per ring call with `protocol`."""
    return BASE_LATENCY_US[protocol] * US


def ring_latency(steps: int, inter_steps: int, alpha_intra: float, alpha_inter: float, base: float) -> float:
    """base + (steps − inter_steps)·α_intra + inter_steps·α_inter: NCCL's ring latency for one call (or one phase
    of it: `steps` = n − 1, `inter_steps` = m − 1 for an all-gather or reduce-scatter over m nodes)."""
    if not 0 <= inter_steps <= steps:
        raise ValueError(f"a ring of {steps} steps cannot cross nodes {inter_steps} times")
    return base + (steps - inter_steps) * alpha_intra + inter_steps * alpha_inter
