"""Host memory and NVMe per node: the capacities offload fills (`zerosim memory --host`, `zerosim plan --host`).

A node's host DRAM and its data NVMe are shared by the ranks on it, so offload fits a node when the ranks on it
together hold no more than the node has: host bytes per rank × ranks per node <= `memory`, and the same for `nvme`.
Each preset is one machine type, with the GPUs it carries and the host link they copy over (the timeline's `pcie`):

  name            datasheet                                             DRAM per node      NVMe      GPUs  link   GB/s
  dgx-2           DGX-2: 16x V100 32GB, 1.5 TB DDR4, 30 TB NVMe           1.5 TiB (1.65e12)  30.72e12  16    pcie3  256
  dgx-a100-320gb  DGX A100 320GB: 8x A100 40GB, 1 TB DDR4, 15 TB NVMe     1 TiB (1.10e12)    15.36e12   8    pcie4  410
  dgx-a100        DGX A100 640GB: 8x A100 80GB, 2 TB DDR4, 30 TB NVMe     2 TiB (2.20e12)    30.72e12   8    pcie4  410
  dgx-h100        DGX H100: 8x H100 80GB, 2 TB DDR5, 8x 3.84 TB U.2 NVMe  2 TiB (2.20e12)    30.72e12   8    pcie5  614
  dgx-h200        DGX H200: 8x H200 141GB, the DGX H100's host            2 TiB (2.20e12)    30.72e12   8    pcie5  614

A GPU no preset carries (the RTX 3090, the Grand Teton H100) is given the DGX H100's host (`host_of`), its copies at
the slower of the two ends' PCIe (`host_link`): set `--host`, `--host-memory`, `--host-nvme` to yours.

NVMe: the node's NVMe for data, bytes. GB/s: the node's peak DRAM bandwidth, its two CPUs' channels × transfer rate
× 8 bytes (vendors' CPU specifications: the DGX-2's Xeon Platinum 8168, 6 channels of DDR4-2666 each; the DGX A100's
EPYC 7742 (both memory sizes), 8 of DDR4-3200; the DGX H100's and H200's Xeon Platinum 8480C, 8 of DDR5-4800). A
peak, as the GPUs' are: DeepSpeedCPUAdam is memory-bound and reaches a fraction of it; the ranks of a node share
it (`cpu_bandwidth`).

Sources: the DGX-2 as NVIDIA announced it (16 V100 32GB HBM2, "1.5 TB" of system memory, "30 TB NVMe": AnandTech's
and DCD's reports of the GTC 2018 launch; the ZeRO-Offload paper trains on this machine); NVIDIA's DGX A100
datasheet (640GB system: 2 TB system memory, 30 TB internal storage); the DGX A100 as launched in May 2020, the
320GB system (8 A100 40GB, two EPYC 7742, "1TB of DDR4 memory", "15TB" of internal NVMe: Hardware Times' launch
report; the 640GB system doubled both); NVIDIA's DGX BasePOD reference architecture, "NVIDIA DGX H200 and H100
Systems" (2 TB of DDR5 system memory, eight 3.84 TB U.2 NVMe drives for storage/cache, the one host of both; the two
1.92 TB M.2 drives hold the OS and are left out). DRAM sizes count in binary units (64 GB DIMMs hold 64 GiB),
so "2 TB" is taken as 2 TiB; NVMe sizes are decimal (3.84 TB = 3.84e12 bytes). The OS and its page cache keep some
of the DRAM: what one process can pin is less (set `memory` from `free -b` on your nodes: `with_memory`).
"""

from __future__ import annotations

from dataclasses import replace

from zerosim._dataclass import dataclass
from zerosim.analysis.costs._comm import LINKS
from zerosim.analysis.costs._gpus import get_gpu

TIB = 1 << 40


@dataclass(frozen=True)
class Host:
    """One machine type's host side: DRAM and data NVMe per node, the GPUs it holds, the link they copy over."""

    key: str  # the name flags take ("dgx-a100")
    name: str  # what reports print
    memory: int  # bytes of host DRAM per node (the datasheet's system memory)
    nvme: int  # bytes of NVMe per node for data (the OS drives left out)
    gpus: int  # GPUs per node: the ranks that share its DRAM and NVMe
    gpu: str  # the GPUS key of its GPUs (analysis/costs/_gpus.py)
    pcie: str  # the LINKS key of its GPUs' host link (the timeline's device <-> host copies)
    dram_bandwidth: float  # bytes/s: the node's peak DRAM bandwidth (both CPUs), what its CPU optimizer steps share
    source: str

    def cpu_bandwidth(self, ranks_per_node: int) -> float:
        """Bytes/s one rank's CPU optimizer streams at when `ranks_per_node` ranks step at once (the timeline's
        `host_bandwidth`): the node's DRAM peak, shared."""
        return self.dram_bandwidth / max(ranks_per_node, 1)

    def with_memory(self, memory: float | None = None, nvme: float | None = None) -> "Host":
        """This host with the DRAM and / or NVMe per node you measured (bytes), checked."""
        for name, v in (("memory", memory), ("nvme", nvme)):
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e18):
                raise ValueError(f"host {name} per node must be a number of bytes > 0, got {v!r}")
        return replace(self, memory=self.memory if memory is None else int(memory),
                       nvme=self.nvme if nvme is None else int(nvme), name=self.name + " (set)")


HOSTS = {
    h.key: h
    for h in (
        Host("dgx-2", "DGX-2 (16x V100 32GB)", 3 * TIB // 2, 8 * 3_840 * 10**9, 16, "v100-32gb", "pcie3",
             2 * 6 * 2666e6 * 8, "NVIDIA DGX-2 as launched at GTC 2018: 1.5 TB DDR4, 30 TB NVMe (AnandTech, DCD)"),
        Host("dgx-a100-320gb", "DGX A100 320GB (8x A100 40GB)", 1 * TIB, 4 * 3_840 * 10**9, 8, "a100-40gb", "pcie4",
             2 * 8 * 3200e6 * 8, "the DGX A100 as launched (May 2020, 320GB system): 1 TB DDR4, 15 TB internal NVMe "
             "(Hardware Times' launch report)"),
        Host("dgx-a100", "DGX A100 640GB (8x A100 80GB)", 2 * TIB, 8 * 3_840 * 10**9, 8, "a100-80gb", "pcie4",
             2 * 8 * 3200e6 * 8, "NVIDIA DGX A100 datasheet (640GB system): 2 TB system memory, 30 TB internal "
             "storage"),
        Host("dgx-h100", "DGX H100 (8x H100 80GB)", 2 * TIB, 8 * 3_840 * 10**9, 8, "h100-80gb", "pcie5",
             2 * 8 * 4800e6 * 8, "NVIDIA DGX BasePOD reference architecture, DGX H200 and H100 systems: 2 TB DDR5, "
             "8x 3.84 TB U.2 NVMe"),
        Host("dgx-h200", "DGX H200 (8x H200 141GB)", 2 * TIB, 8 * 3_840 * 10**9, 8, "h200", "pcie5",
             2 * 8 * 4800e6 * 8, "NVIDIA DGX BasePOD reference architecture, DGX H200 and H100 systems: 2 TB DDR5, "
             "8x 3.84 TB U.2 NVMe"),
    )
}


def get_host(host) -> Host:
    """A `Host`, or one of HOSTS by key ("dgx-2", "dgx-a100-320gb", "dgx-a100", "dgx-h100", "dgx-h200")."""
    if isinstance(host, Host):
        return host
    if isinstance(host, str) and host.lower() in HOSTS:
        return HOSTS[host.lower()]
    raise ValueError(f"unknown host {host!r}; choose one of {', '.join(HOSTS)} or pass a zerosim.analysis.costs.Host")


def host_of(gpu) -> Host:
    """The host whose GPUs are `gpu` (a GPUS key or a GPU), else the DGX H100's: 2 TB per 8-GPU node."""
    key = getattr(gpu, "key", gpu)
    return next((h for h in HOSTS.values() if h.gpu == key), HOSTS["dgx-h100"])


def host_link(host: Host, gpu=None) -> str:
    """The LINKS key an offload's copies run over between `gpu` (a GPUS key or a GPU; None: the host's own) and
    `host`: a PCIe link trains at the fastest generation both ends support, so the slower of the two."""
    if gpu is None:
        return host.pcie
    return min(host.pcie, get_gpu(gpu).pcie, key=lambda k: LINKS[k].bandwidth)


def host_fit(per_rank: dict, ranks: int, host: Host, gpus_per_node: int | None = None) -> dict:
    """Whether the ranks on one node fit its DRAM and NVMe: `per_rank` {"host": bytes, "nvme": bytes} one rank holds
    (its ledger's peak on each tier); the ranks per node are `gpus_per_node` (default the host's GPUs), at most
    `ranks`. Returns {"ranks_per_node", tier: {"per_node", "capacity", "fits", "margin"}} for "host" and "nvme"."""
    per_node = min(ranks, gpus_per_node or host.gpus)
    out = {"ranks_per_node": per_node}
    for tier, capacity in (("host", host.memory), ("nvme", host.nvme)):
        need = per_rank.get(tier, 0) * per_node
        out[tier] = {"per_node": need, "capacity": capacity, "fits": need <= capacity, "margin": capacity - need}
    return out
