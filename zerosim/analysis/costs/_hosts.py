"""Host memory and NVMe per node: the capacities offload fills (`zerosim memory --host`, `zerosim plan --host`).

A node's host DRAM and its data NVMe are shared by the ranks on it, so offload fits a node when the ranks on it
together hold no more than the node has: host bytes per rank × ranks per node <= `memory`, and the same for `nvme`.
Each preset is one machine type, with the GPUs it carries and the host link they copy over (the timeline's `pcie`):

  name       datasheet                                             memory per node    NVMe for data  GPUs  link   DRAM
  dgx-2      DGX-2: 16x V100 32GB, 1.5 TB DDR4, 30 TB NVMe           1.5 TiB (1.65e12)  30.72e12       16    pcie3  256
  dgx-a100   DGX A100 640GB: 8x A100 80GB, 2 TB DDR4, 30 TB NVMe     2 TiB (2.20e12)    30.72e12        8    pcie4  410
  dgx-h100   DGX H100: 8x H100 80GB, 2 TB DDR5, 8x 3.84 TB U.2 NVMe  2 TiB (2.20e12)    30.72e12        8    pcie5  614

DRAM: the node's peak memory bandwidth in GB/s, its two CPUs' channels × transfer rate × 8 bytes (vendors' CPU
specifications: the DGX-2's Xeon Platinum 8168, 6 channels of DDR4-2666 each; the DGX A100's EPYC 7742, 8 of
DDR4-3200; the DGX H100's Xeon Platinum 8480C, 8 of DDR5-4800). A peak, as the GPUs' are: DeepSpeedCPUAdam is
memory-bound and reaches a fraction of it; the ranks of a node share it (`cpu_bandwidth`).

Sources: the DGX-2 as NVIDIA announced it (16 V100 32GB HBM2, "1.5 TB" of system memory, "30 TB NVMe": AnandTech's
and DCD's reports of the GTC 2018 launch; the ZeRO-Offload paper trains on this machine); NVIDIA's DGX A100
datasheet (640GB system: 2 TB system memory, 30 TB internal storage); NVIDIA's DGX BasePOD reference architecture,
"NVIDIA DGX H200 and H100 Systems" (2 TB of DDR5 system memory, eight 3.84 TB U.2 NVMe drives for storage/cache;
the two 1.92 TB M.2 drives hold the OS and are left out). DRAM sizes count in binary units (64 GB DIMMs hold 64 GiB),
so "2 TB" is taken as 2 TiB; NVMe sizes are decimal (3.84 TB = 3.84e12 bytes). The OS and its page cache keep some
of the DRAM: what one process can pin is less (set `memory` from `free -b` on your nodes: `with_memory`).
"""

from __future__ import annotations

from dataclasses import replace

from zerosim._dataclass import dataclass

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
        Host("dgx-a100", "DGX A100 640GB (8x A100 80GB)", 2 * TIB, 8 * 3_840 * 10**9, 8, "a100-80gb", "pcie4",
             2 * 8 * 3200e6 * 8, "NVIDIA DGX A100 datasheet (640GB system): 2 TB system memory, 30 TB internal "
             "storage"),
        Host("dgx-h100", "DGX H100 (8x H100 80GB)", 2 * TIB, 8 * 3_840 * 10**9, 8, "h100-80gb", "pcie5",
             2 * 8 * 4800e6 * 8, "NVIDIA DGX BasePOD reference architecture, DGX H200 and H100 systems: 2 TB DDR5, "
             "8x 3.84 TB U.2 NVMe"),
    )
}


def get_host(host) -> Host:
    """A `Host`, or one of HOSTS by key ("dgx-2", "dgx-a100", "dgx-h100")."""
    if isinstance(host, Host):
        return host
    if isinstance(host, str) and host.lower() in HOSTS:
        return HOSTS[host.lower()]
    raise ValueError(f"unknown host {host!r}; choose one of {', '.join(HOSTS)} or pass a zerosim.analysis.costs.Host")


def host_of(gpu) -> Host:
    """The host whose GPUs are `gpu` (a GPUS key or a GPU), else the DGX H100's: 2 TB per 8-GPU node."""
    key = getattr(gpu, "key", gpu)
    return next((h for h in HOSTS.values() if h.gpu == key), HOSTS["dgx-h100"])


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
