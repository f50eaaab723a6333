"""What lives on a GPU beside the model states and activations: labelled estimates, never mixed into the ledgers.

The ledgers measure what the training step allocates. A real job also holds memory no ledger sees, and users'
most common complaint about estimators is that the real job used more than the estimate (deepspeedai/DeepSpeed
#4093, #1302, #1445; pytorch/pytorch#153302). zerosim prints these as rows of their own, each with its basis:

    CUDA context          287,047,680 B     measured by PyTorch when it made lazy module loading the default
                                            (pytorch/pytorch#86509: 287,047,680 B lazy vs 666,632,192 B eager);
                                            it varies with GPU, driver and CUDA version, and grows with kernels loaded
    NCCL buffers          1.06e9 B          measured on 8×H100 in one node, NCCL only, before the first
                                            all-to-all (NVIDIA/nccl#1685); a buffer set per channel and peer is
                                            LL 0.5 MiB + LL128 4.7 MB + Simple 4 MiB (src/init.cc, computeBuffSizes),
                                            so it grows with channels (NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS shrink it)
    DeepSpeed buckets     its schedule's        wherever DeepSpeed's schedule runs (`deepspeed_buckets`: --comm
                                            deepspeed, plan's default, or a DeepSpeed config): stage 1/2 with
                                            contiguous_gradients: reduce_bucket_size 16-bit elements, twice with
                                            overlap_comm (deepspeed/runtime/zero/stage_1_and_2.py, setup_buckets:
                                            buf_0, and buf_1 "to avoid data access conflict when overlap_comm is
                                            enabled"); stage 3: one such buffer (stage3.py, the IPG bucket). HF's
                                            DeepSpeed guide quotes a larger rule, overlap_comm "uses 4.5x" the
                                            bucket sizes (9 GB at 5e8)
    allocator reserve     5 % of the peak       an assumption: the caching allocator keeps freed blocks and splits
                                            segments, so it reserves more than it allocates, by an amount that
                                            depends on the workload (2.4 % "reserved but unallocated" at a 78 GiB
                                            job in vllm-project/compressed-tensors#587, which then reserves 5 %;
                                            34 % less peak with expandable_segments in meta-pytorch/torchtune#1185)

A verdict (`fit`) compares the measured peak plus these with a GPU's capacity and says by how much it fits.
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.analysis.costs._gpus import get_gpu

CUDA_CONTEXT = 287_047_680  # pytorch/pytorch#86509, lazy loading (CUDA_MODULE_LOADING=LAZY, PyTorch >= 1.13)
NCCL_BUFFERS = 1_060_000_000  # NVIDIA/nccl#1685: "NV 1.06 GB" on an 8xH100 node before the first all-to-all
ALLOCATOR_RESERVE = 0.05  # fraction of the measured peak: an assumption (see the module docstring)


@dataclass(frozen=True)
class Overhead:
    """One labelled estimate: bytes per rank, and what they rest on."""

    name: str
    bytes: int
    basis: str


@dataclass(frozen=True)
class DeepSpeedBuckets:
    """What DeepSpeed's gradient buckets need from its config (zero_optimization's keys)."""

    reduce_bucket_size: int  # elements
    contiguous_gradients: bool = True  # DeepSpeed's default
    overlap_comm: bool | None = False  # None: DeepSpeed's default, True at stage 3 only (config.py, overlap_comm_valid)
    element_bytes: int = 2  # the buffers hold the parameters' dtype: 2 (fp16/bf16), 4 in fp32 training
    source: str = "the config"  # where the settings were read: the report's basis column names it


def deepspeed_buckets(comm, precision_name: str) -> DeepSpeedBuckets | None:
    """The gradient bucket buffers DeepSpeed allocates under `comm` (a CommSchedule), or None where the schedule is not
    DeepSpeed's (`CommSchedule.deepspeed`: framework "deepspeed"; seed 004's, FSDP's and Megatron's hold no such
    buffer). Its reduce_bucket_size and overlap_comm are the schedule's, so the buffers follow the schedule the timeline
    times (--reduce-bucket-size, --no-overlap); contiguous_gradients is DeepSpeed's default (True). A DeepSpeed config
    gives its own (frameworks/deepspeed/_config.py, `DeepSpeedRun.buckets`: its contiguous_gradients too)."""
    if getattr(comm, "framework", None) != "deepspeed" or comm.reduce_bucket_size is None:
        return None
    return DeepSpeedBuckets(comm.reduce_bucket_size, True, comm.overlap_comm, 4 if precision_name == "fp32" else 2,
                            "DeepSpeed's schedule")


def deepspeed_bucket_bytes(stage: int, buckets: DeepSpeedBuckets) -> int:
    """Bytes of DeepSpeed's gradient bucket buffers on one rank (see the module docstring); 0 at stage 0."""
    if stage == 0 or not buckets.contiguous_gradients:
        return 0
    copies = 2 if (stage in (1, 2) and buckets.overlap_comm) else 1
    return copies * buckets.reduce_bucket_size * buckets.element_bytes


def runtime_overheads(
    peak: int, ranks: int, stage: int, deepspeed: DeepSpeedBuckets | None = None, reserve: float = ALLOCATOR_RESERVE
) -> list:
    """The estimates for one rank whose ledger peaked at `peak` bytes, as `Overhead` rows (none are measured)."""
    if not 0 <= reserve < 1:
        raise ValueError(f"the allocator reserve is a fraction of the peak in [0, 1), got {reserve!r}")
    rows = [Overhead("CUDA context", CUDA_CONTEXT, "estimate: PyTorch's lazy-loading measurement (pytorch#86509)")]
    if ranks > 1:
        rows.append(Overhead("NCCL buffers", NCCL_BUFFERS, "estimate: 8xH100 node, measured (NVIDIA/nccl#1685)"))
    if deepspeed is not None and stage > 0:
        b = deepspeed
        rows.append(
            Overhead(
                "DeepSpeed gradient buckets",
                deepspeed_bucket_bytes(stage, b),
                f"from {b.source}: reduce_bucket_size {b.reduce_bucket_size:,} x {b.element_bytes} B"
                + (" x 2 (overlap_comm)" if stage in (1, 2) and b.overlap_comm and b.contiguous_gradients else "")
                + ("" if b.contiguous_gradients else " (off: contiguous_gradients false)"),
            )
        )
    rows.append(
        Overhead(
            "allocator reserve",
            int(reserve * peak),
            f"assumption: {reserve:.0%} of the measured peak (fragmentation varies by workload)",
        )
    )
    return rows


@dataclass(frozen=True)
class Fit:
    """A rank's measured peak plus the estimates, against one GPU's capacity."""

    gpu: str  # the GPU's name
    capacity: int  # bytes
    measured: int  # the ledger's peak: what zerosim measured
    overheads: int  # the estimates' sum
    total: int  # measured + overheads

    @property
    def margin(self) -> int:
        """Bytes left (negative: short by that much)."""
        return self.capacity - self.total

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    @property
    def fits_measured_only(self) -> bool:
        """Whether the measured peak alone would fit (the estimates decide the verdict when this differs)."""
        return self.measured <= self.capacity


def fit(measured_peak: int, gpu, overheads=()) -> Fit:
    """The verdict for one rank: fits when measured + overheads <= the GPU's capacity."""
    g = get_gpu(gpu)
    extra = sum(o.bytes for o in overheads)
    return Fit(g.name, g.capacity, int(measured_peak), extra, int(measured_peak) + extra)
