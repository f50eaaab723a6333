"""GPU memory capacities: what a rank's peak is compared against (`zerosim memory --gpu`, `zerosim plan`).

Each GPU's capacity is the total its driver reports (nvidia-smi's "Memory-Usage" total, which is what
`cudaMemGetInfo` gives a process: all it can ever hold, the CUDA context included), in MiB as nvidia-smi prints
it, beside the datasheet's marketed size. The two differ: an "80 GB" H100 reports 81,559 MiB = 85.5e9 bytes;
a "141 GB" H200 reports 143,771 MiB = 150.8e9 bytes. `device` names the timeline preset with the GPU's compute
rates (zerosim/analysis/timeline/_devices.py), so one flag gives both memory and time.

    name          datasheet                                         driver total (nvidia-smi)            host link
    rtx3090       GeForce RTX 3090: 24 GB GDDR6X                    24,576 MiB                           PCIe 4.0
    a100-40gb     A100 SXM4 40GB: 40 GB HBM2                        40,960 MiB (A100-SXM4-40GB)          PCIe 4.0
    a100-80gb     A100 SXM4 80GB: 80 GB HBM2e                       81,920 MiB                           PCIe 4.0
    h100-80gb     H100 SXM5 80GB: 80 GB HBM3                        81,559 MiB (NVIDIA H100 80GB HBM3)   PCIe 5.0
    h200          H200 SXM: 141 GB HBM3e                            143,771 MiB                          PCIe 5.0
    h100-hbm2e    H100 96GB HBM2e, 500 W (torchtitan's Grand Teton) not published: 96e9 bytes, marketed  PCIe 5.0
    v100-32gb     Tesla V100 SXM2 32GB: 32 GB HBM2                  32,510 MiB (Tesla V100-SXM2-32GB)    PCIe 3.0

Sources: NVIDIA's datasheets (GeForce RTX 3090 product page and the GA102 whitepaper; "NVIDIA A100 Tensor Core
GPU" datasheet; "NVIDIA H100 Tensor Core GPU" datasheet; "NVIDIA H200 Tensor Core GPU" datasheet) for the marketed
sizes; the driver totals are those nvidia-smi prints on these cards (e.g. "81559MiB" on every H100 80GB HBM3;
"32510MiB" on the 32 GB V100s, SXM2, SXM3 and PCIe alike, e.g. PaddlePaddle's PLSC benchmarks, "8 NVIDIA Tesla V100
32G (32510MiB)"). The V100 32GB is the GPU of the ZeRO-Offload paper's headline (a 13B model on one of them).

The host link is the GPU's own PCIe generation (x16), from the same datasheets' interconnect rows (V100 "PCIe
32 GB/s", Gen3 x16 both ways; A100 "PCIe Gen4"; H100 and H200 "PCIe Gen5"; the RTX 3090's PCI Express 4.0; the
Grand Teton H100 is an H100). A PCIe link trains at the fastest generation both ends support, so an offload's
copies run at the slower of the GPU's and the host's (`host_link`, analysis/costs/_hosts.py): an A100 in a PCIe
5.0 host still copies at 4.0.
"""

from __future__ import annotations

from zerosim._dataclass import dataclass

MIB = 1 << 20


@dataclass(frozen=True)
class GPU:
    """One accelerator's memory: what the driver reports as total, the datasheet's size, and its compute preset."""

    key: str  # the name flags take ("h100-80gb")
    name: str  # what reports print
    capacity: int  # bytes: the driver's total (nvidia-smi), what a process can hold at most
    datasheet: str  # the marketed size, as printed
    device: str  # zerosim.analysis.timeline.DEVICES key: the compute rates and HBM bandwidth
    pcie: str  # the LINKS key of its own host interface (its datasheet's PCIe generation, x16)
    source: str


GPUS = {
    g.key: g
    for g in (
        GPU(
            "rtx3090",
            "GeForce RTX 3090 24GB",
            24_576 * MIB,
            "24 GB GDDR6X",
            "rtx3090",
            "pcie4",
            "NVIDIA GeForce RTX 3090 product page / GA102 whitepaper; nvidia-smi total 24576MiB",
        ),
        GPU(
            "a100-40gb",
            "A100 SXM4 40GB",
            40_960 * MIB,
            "40 GB HBM2",
            "a100-40gb",
            "pcie4",
            "NVIDIA A100 datasheet (40GB SXM column); nvidia-smi total 40960MiB",
        ),
        GPU(
            "a100-80gb",
            "A100 SXM4 80GB",
            81_920 * MIB,
            "80 GB HBM2e",
            "a100",
            "pcie4",
            "NVIDIA A100 datasheet (80GB SXM column); nvidia-smi total 81920MiB",
        ),
        GPU(
            "h100-80gb",
            "H100 SXM5 80GB",
            81_559 * MIB,
            "80 GB HBM3",
            "h100",
            "pcie5",
            "NVIDIA H100 datasheet (SXM); nvidia-smi total 81559MiB",
        ),
        GPU(
            "h100-hbm2e",
            "H100 96GB HBM2e 500 W (Grand Teton)",
            96 * 10**9,
            "96 GB HBM2e",
            "h100-hbm2e",
            "pcie5",
            "torchtitan benchmarks/llama3_h100_202412_torchtitan.md ('96GB HBM2e'); no driver total published",
        ),
        GPU(
            "v100-32gb",
            "Tesla V100 SXM2 32GB",
            32_510 * MIB,
            "32 GB HBM2",
            "v100",
            "pcie3",
            "NVIDIA Tesla V100 datasheet (SXM2, 32 GB); nvidia-smi total 32510MiB",
        ),
        GPU(
            "h200",
            "H200 SXM 141GB",
            143_771 * MIB,
            "141 GB HBM3e",
            "h200",
            "pcie5",
            "NVIDIA H200 datasheet (SXM); nvidia-smi total 143771MiB",
        ),
    )
}


def get_gpu(gpu) -> GPU:
    """A `GPU`, or one of GPUS by key ("rtx3090", "a100-40gb", "a100-80gb", "h100-80gb", "h200", "h100-hbm2e",
    "v100-32gb")."""
    if isinstance(gpu, GPU):
        return gpu
    if isinstance(gpu, str) and gpu.lower() in GPUS:
        return GPUS[gpu.lower()]
    raise ValueError(f"unknown GPU {gpu!r}; choose one of {', '.join(GPUS)} or pass a zerosim.analysis.costs.GPU")
