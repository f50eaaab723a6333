"""What the ranks run on: accelerator presets (peak rates, HBM bandwidth) and the links between them.

A `Hardware` pairs one `Device` with one `Link` and names the format the layers compute in; the
timeline charges every recorded event to it (_cost.py). Every number is a vendor's *peak*: the
roofline's ceiling, which real kernels reach only a fraction of (say so, or derate a device with
`dataclasses.replace`, when comparing with a measured run).

Links are `zerosim.analysis.costs._comm`'s presets (NVLink 2, 3 and 4, PCIe 3, 4 and 5, InfiniBand HDR and NDR,
100 GbE), already per direction (B), with NCCL's own latencies (src/graph/tuning.cc, ring + Simple protocol, the
protocol for large messages: zerosim/analysis/costs/_links.py): per ring step NVLink 3.4 µs, PCI 5.7 µs, network
14 µs, plus a base latency of 8.4 µs per call. Pass any `Link` (e.g. `Link("NDR, LL128", 50e9, 4e-6, "", 14e-6)`) to
try others. Offload's copies run over a host link (`pcie`: pcie3, pcie4, pcie5; its α once a copy, no per-call base)
and a rank's share of NVMe (`nvme`), α assumed.
"""

from __future__ import annotations

from dataclasses import field, replace

from zerosim._dataclass import dataclass
from zerosim.analysis.costs import LINKS, Link, check_rate, host_link
from zerosim.cluster import INTER, INTRA
from zerosim.precision import get_format

TERA = 1e12


@dataclass(frozen=True)
class Device:
    """One accelerator's dense peak rates (FLOP/s, no sparsity) per compute format and its HBM bandwidth."""

    name: str
    fp64: float  # FP64 (tensor core where there is one: cuBLAS DGEMM uses it)
    fp32: float  # plain FP32 (no TF32: PyTorch's matmul default, torch.backends.cuda.matmul.allow_tf32=False)
    fp16: float  # FP16 and BF16 tensor cores, dense
    fp8: float | None  # FP8 tensor cores, dense; None where the device has none (fp8 then runs at the 16-bit rate)
    hbm: float  # bytes/s, peak memory bandwidth
    source: str
    # the LINKS key its ranks ring over within a node by default: its NVLink through NVSwitch (V100: NVLink 2, 300 GB/s
    # bidirectional, the DGX-2's; A100: NVLink 3, 600 GB/s; H100 and H200: NVLink 4, 900 GB/s), or PCIe where a box
    # has no NVSwitch (RTX 3090: PCIe 4.0; its NVLink bridge joins two cards only)
    link: str = "nvlink4"
    # bf16 tensor cores (Ampere and after); the V100's take fp16 alone (its datasheet's "Tensor Performance" is fp16),
    # so zerosim has no rate to time a bf16 GEMM on it at: refused, not charged at the fp16 rate
    bf16: bool = True

    def __post_init__(self):  # where a device's rates are born: every time divides by them (costs/_rates.py)
        for name in ("fp64", "fp32", "fp16", "fp8", "hbm"):
            if name != "fp8" or self.fp8 is not None:
                check_rate(getattr(self, name), f"the {name} rate of device {self.name!r}")

    def rate(self, fmt) -> float:
        """Peak FLOP/s for matrix work in `fmt` (a format name or `Format`); a ValueError for bf16 on a device without
        bf16 units (the V100)."""
        f = get_format(fmt)
        if f.name == "bf16" and not self.bf16:
            raise ValueError(f"the {self.name} has no bf16 units (its tensor cores take fp16 alone): zerosim has no "
                             "rate to time bf16 at on it; time fp16-mixed or fp32 (--precision)")
        if f.bits == 64:
            return self.fp64
        if f.bits == 32:
            return self.fp32
        if f.bits == 8 and self.fp8 is not None:
            return self.fp8
        return self.fp16  # 16 bits, and 8 bits on a device without fp8 units (upcast to 16)


# NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf), column
# "A100 80GB SXM": FP64 Tensor Core 19.5 TF, FP32 19.5 TF, FP16/BF16 Tensor Core 312 TF (the datasheet's
# 624 is "with sparsity"), GPU memory bandwidth 2,039 GB/s. No FP8 on Ampere.
A100_80GB_SXM = Device("A100 80GB SXM", 19.5 * TERA, 19.5 * TERA, 312 * TERA, None, 2039e9,
                       "NVIDIA A100 datasheet (80GB SXM column), dense, no sparsity", link="nvlink3")

# NVIDIA H100 Tensor Core GPU Architecture whitepaper (the H100 SXM5 column of its GPU comparison table):
# FP64 Tensor Core 66.9 TF, FP32 66.9 TF, FP16/BF16 Tensor Core 989.4 TF dense, FP8 1,978.9 TF dense.
# The H100 datasheet rounds these to 67 / 67 and prints 1,979 and 3,958 TF "with sparsity" (twice dense).
# HBM3 bandwidth 3.35 TB/s (datasheet, H100 SXM).
H100_SXM = Device("H100 SXM", 66.9 * TERA, 66.9 * TERA, 989.4 * TERA, 1978.9 * TERA, 3.35e12,
                  "NVIDIA H100 whitepaper / datasheet (SXM5), dense, no sparsity")

# The same datasheet's "A100 40GB SXM" column: the 80GB card's rates, GPU memory bandwidth 1,555 GB/s.
A100_40GB_SXM = Device("A100 40GB SXM", 19.5 * TERA, 19.5 * TERA, 312 * TERA, None, 1555e9,
                       "NVIDIA A100 datasheet (40GB SXM column), dense, no sparsity", link="nvlink3")

# NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): FP64 Tensor Core 67 TF, FP32 67 TF, FP16/BF16 Tensor Core 1,979 TF
# and FP8 3,958 TF "with sparsity" (half dense: H100 SXM's 989.4 and 1,978.9, the same GH100 die and clocks), GPU memory
# bandwidth 4.8 TB/s.
H200_SXM = Device("H200 SXM", 66.9 * TERA, 66.9 * TERA, 989.4 * TERA, 1978.9 * TERA, 4.8e12,
                  "NVIDIA H200 datasheet (SXM), dense, no sparsity")

# torchtitan's benchmark GPUs (pytorch/torchtitan, benchmarks/llama3_h100_202412_torchtitan.md): Meta's Grand Teton
# H100s, "96GB HBM2e with 2.4 TB/sec peak memory bandwidth", "the default 500W power limit"; their peak "is between
# SXM and NVL, and we don't know its exact value" (its footnote 2). zerosim takes the midpoint of the two datasheet
# columns (H100 datasheet, dense: SXM 989.4 / NVL 835.5 TF BF16, 1978.9 / 1670.5 FP8, 66.9 / 60 FP32): 912.45 TF
# BF16, 1824.7 FP8; an assumption, ±8.5 % at worst, said wherever the device's numbers are printed.
H100_HBM2E = Device("H100 HBM2e 500 W (Grand Teton)", 63.45 * TERA, 63.45 * TERA, 912.45 * TERA, 1824.7 * TERA,
                    2.4e12, "torchtitan benchmarks/llama3_h100_202412_torchtitan.md; peak: midpoint of H100 SXM "
                    "and NVL (assumed)")

# NVIDIA Ampere GA102 GPU Architecture whitepaper, GeForce RTX 3090 column: Peak FP16 and BF16 Tensor TFLOPS with FP32
# accumulate 71 (142 with sparsity; the 142/284 "FP16 accumulate" figures do not apply to mixed precision, which
# accumulates in FP32), peak FP32 35.6 TFLOPS, FP64 1/64 of FP32 (0.56), GDDR6X bandwidth 936 GB/s. No FP8.
RTX_3090 = Device("GeForce RTX 3090", 0.556 * TERA, 35.6 * TERA, 71 * TERA, None, 936e9,
                  "NVIDIA GA102 whitepaper (RTX 3090), FP32 accumulate, dense", link="pcie4")

# NVIDIA Tesla V100 GPU Accelerator datasheet, V100 SXM2 column: Double-Precision 7.8 TF, Single-Precision 15.7 TF,
# Tensor Performance 125 TF (fp16 inputs, fp32 accumulate), HBM2 bandwidth 900 GB/s. No BF16 units on Volta (a bf16
# step is refused: `Device.bf16`) and no FP8. Its host link is PCIe 3.0.
V100_SXM2 = Device("Tesla V100 SXM2", 7.8 * TERA, 15.7 * TERA, 125 * TERA, None, 900e9,
                   "NVIDIA Tesla V100 datasheet (SXM2), tensor cores fp16", link="nvlink2", bf16=False)

DEVICES = {"v100": V100_SXM2, "a100": A100_80GB_SXM, "h100": H100_SXM, "a100-40gb": A100_40GB_SXM, "h200": H200_SXM,
           "rtx3090": RTX_3090, "h100-hbm2e": H100_HBM2E}


def get_device(device) -> Device:
    """A `Device`, or one of DEVICES by name ("a100", "h100", "a100-40gb", "h200", "rtx3090")."""
    if isinstance(device, Device):
        return device
    if isinstance(device, str) and device.lower() in DEVICES:
        return DEVICES[device.lower()]
    raise ValueError(f"unknown device {device!r}; choose one of {sorted(DEVICES)} or pass a "
                     "zerosim.analysis.timeline.Device")


def get_link(link) -> Link:
    """A `zerosim.analysis.costs.Link`, or one of `zerosim.analysis.costs.LINKS` by name ("nvlink4", "pcie5", "ib_ndr",
    "100gbe")."""
    if isinstance(link, Link):
        return link
    if isinstance(link, str) and link in LINKS:
        return LINKS[link]
    raise ValueError(f"unknown link {link!r}; choose one of {sorted(LINKS)} or pass a zerosim.analysis.costs.Link")


@dataclass(frozen=True)
class Hardware:
    """Every rank: one `device`, its ring neighbours over one `link`, layers computing in `compute`; with an
    `inter_link`, two link tiers: a call whose rings stay inside nodes runs over `link` (NVLink), one whose rings
    leave a node over `inter_link` (InfiniBand), each tier its own communication stream (_simulate.py)."""

    device: Device | str = "h100"  # a key of DEVICES: "a100", "h100", "a100-40gb", "h200", "rtx3090"
    link: Link | str | None = None  # within a node (None: the device's own, `Device.link`); "ib_ndr" across nodes
    compute: str = "fp16"  # the format forward/backward run in (the engine's precision.compute)
    inter_link: Link | str | None = None  # across nodes ("ib_ndr"); None: every call runs over `link` (one tier)
    # -- offload (parallel/offload): the host's links and its CPU optimizer; none of them is used without offload --
    pcie: Link | str = field(default="pcie4", repr=False)  # device <-> host copies ("pcie3" for a V100)
    nvme: Link | str = field(default="nvme", repr=False)  # host <-> NVMe swaps: one rank's share of the node's drives
    # bytes/s of host memory one rank's CPU optimizer streams through (DeepSpeedCPUAdam is memory-bound): an assumption,
    # a two-socket node's ~200 GB/s of DDR shared by 8 ranks; set it from a measured CPU Adam run
    host_bandwidth: float = field(default=25e9, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "device", get_device(self.device))
        object.__setattr__(self, "link", get_link(self.link or self.device.link))
        object.__setattr__(self, "compute", get_format(self.compute).name)
        self.device.rate(self.compute)  # a format the device cannot compute in is refused here, before any step
        if self.inter_link is not None:
            object.__setattr__(self, "inter_link", get_link(self.inter_link))
        object.__setattr__(self, "pcie", get_link(self.pcie))
        object.__setattr__(self, "nvme", get_link(self.nvme))
        check_rate(self.host_bandwidth, "host_bandwidth (bytes/s)")

    def on_host(self, host, ranks_per_node: int, gpu=None, pcie=None, host_bandwidth: float | None = None):
        """This hardware with `host`'s side (a costs.Host), what an offload's copies and CPU step run on: the copies
        over `pcie` (a LINKS key), else the slower PCIe of `gpu` (a GPUS key or GPU) and the host (costs
        `host_link`); one rank's CPU bandwidth `host_bandwidth` (bytes/s), else the host's DRAM peak shared by
        `ranks_per_node`. The one place the commands, the planner and the explorer take a host's links from."""
        return replace(self, pcie=pcie or host_link(host, gpu),
                       host_bandwidth=host.cpu_bandwidth(ranks_per_node) if host_bandwidth is None else host_bandwidth)

    def transfer_link(self, tier: str) -> Link:
        """The link an offload copy of `tier` ("pcie" or "nvme", cluster/_trace.py TRANSFERS) runs over."""
        return self.pcie if tier == "pcie" else self.nvme

    def link_of(self, tier: str) -> Link:
        """The link a call of `tier` ("intra-node" / "inter-node") runs over: `inter_link` across nodes when there
        is one, else `link`."""
        return self.inter_link if tier == INTER and self.inter_link is not None else self.link

    def stream_of(self, tier: str) -> str:
        """The communication stream a call of `tier` queues on: one per tier with two tiers, else one for all."""
        return tier if self.inter_link is not None else INTRA
