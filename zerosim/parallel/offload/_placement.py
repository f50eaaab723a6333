"""Where each buffer lives, as data: the offload configurations of DeepSpeed (ZeRO-Offload, ZeRO-Infinity) and FSDP2.

Letters: Ψ parameters, N ranks, s = ceil(Ψ/N) the shard. A placement maps the plan's buffers (parallel/data/_plan.py
PLACED) to a memory tier ("device", "host", "nvme"); what it does not name stays on the device. Read from:

    name               buffers off the device                     follows
    none               -                                           every stage without offload
    optimizer-cpu      master, optimizer, grad32 -> host;          DeepSpeed 0.19.8 stage_1_and_2.py with
                       stages 2/3: grads (the reduced shard) too    offload_optimizer.device = "cpu" (ZeRO-Offload):
                                                                    single_partition_of_fp32_groups on `self.device
                                                                    = 'cpu'`, its .grad the fp32 grad partition,
                                                                    DeepSpeedCPUAdam on the host; stage3.py the same
    optimizer-nvme     master, optimizer -> nvme; grad32 (and       ZeRO-Infinity, offload_optimizer.device = "nvme"
                       stages 2/3 grads) -> host                    (stage 3: partitioned_optimizer_swapper.py swaps
                                                                    the fp32 params and the states in per sub-group)
    params-cpu         + params (the 16-bit shard) -> host          offload_param.device = "cpu" (stage 3 only:
                                                                    partition_parameters.py keeps ds_tensor on CPU)
    params-nvme        + params -> nvme                             offload_param.device = "nvme"
                                                                    (partitioned_param_swapper.py)
    fsdp2-cpu          params, grads, master, optimizer, grad32     torch 2.13.0 fully_shard(offload_policy=
                       -> host (stage 3)                             CPUOffloadPolicy()), read in the wheel's
                                                                    torch/distributed/fsdp/_fully_shard/:
                                                                    _fsdp_param.py FSDPParam._init_sharded_param moves
                                                                    the padded sharded param (fp32, the parameter's own
                                                                    dtype) to CPU and pins it; FSDPParam.
                                                                    all_gather_inputs copies it to the device
                                                                    (.to(self.device, non_blocking=True)) and only then
                                                                    casts it to param_dtype; _fsdp_collectives.py
                                                                    foreach_reduce casts the reduce-scattered gradient
                                                                    back to orig_dtype (fp32) and copies it to CPU
                                                                    (.to(torch.device("cpu"))); _fsdp_api.py
                                                                    CPUOffloadPolicy: "the optimizer step runs on CPU
                                                                    with CPU optimizer states"

DeepSpeed offloads only through its ZeRO optimizers, so no placement but "none" runs at stage 0 (0.19.8 engine.py
_configure_optimizer: the ZeRO optimizer only when zero_enabled, i.e. stage > 0, runtime/config.py; at stage 0 an
offload_optimizer only swaps in DeepSpeedCPUAdam over device params). `deepspeed_placement` says what DeepSpeed runs
for its two keys at each stage, where that is not what the keys say.

Placement changes where bytes live and which copies a step makes, never a result bit: the arithmetic is the
plan's and the optimizer's (tests/test_offload.py: engine = oracle with every placement).
"""

from __future__ import annotations

from zerosim._dataclass import dataclass

TIERS = ("device", "host", "nvme")


@dataclass(frozen=True)
class Placement:
    """One offload configuration: the tier of each buffer that leaves the device, and the stages it allows."""

    name: str
    tiers: tuple  # ((buffer, tier), ...) for buffers off the device; "grads" only where the plan shards them
    stages: tuple  # the ZeRO stages it runs at (DeepSpeed: offload_param needs stage 3)
    framework: str  # whose configuration it is: "deepspeed" or "fsdp2"
    cast_on: str = "host"  # where the updated fp32 master becomes 16-bit before the copy to the device: DeepSpeed
    #                        casts on the host into a pinned 16-bit buffer (stage_1_and_2.py step:
    #                        bit16_partition_buffer.copy_(fp32_partition), then one 2-byte copy); FSDP2 copies the
    #                        fp32 CPU shard and casts on the device in its all-gather (_fsdp_param.py)

    def tier(self, buffer: str) -> str:
        return dict(self.tiers).get(buffer, "device")

    def for_plan(self, plan) -> tuple:
        """The placement a plan carries: sharded grads follow the optimizer off the device (DeepSpeed copies each
        reduced partition to its host buffer); whole grads (stages 0/1) stay where backward makes them."""
        return tuple((b, t) for b, t in self.tiers if b != "grads" or plan.shards("grads"))

    @property
    def offloads_params(self) -> bool:
        return self.tier("params") != "device"

    @property
    def offloads_optimizer(self) -> bool:
        return self.tier("optimizer") != "device"


_OPT_CPU = (("master", "host"), ("optimizer", "host"), ("grad32", "host"), ("grads", "host"))
_OPT_NVME = (("master", "nvme"), ("optimizer", "nvme"), ("grad32", "host"), ("grads", "host"))
PLACEMENTS = {p.name: p for p in (
    Placement("none", (), (0, 1, 2, 3), "deepspeed"),
    Placement("optimizer-cpu", _OPT_CPU, (1, 2, 3), "deepspeed"),
    Placement("optimizer-nvme", _OPT_NVME, (3,), "deepspeed"),
    Placement("params-cpu", _OPT_CPU + (("params", "host"),), (3,), "deepspeed"),
    Placement("params-nvme", _OPT_NVME + (("params", "nvme"),), (3,), "deepspeed"),
    Placement("params-cpu-optimizer-nvme", _OPT_NVME + (("params", "host"),), (3,), "deepspeed"),
    Placement("params-nvme-optimizer-cpu", _OPT_CPU + (("params", "nvme"),), (3,), "deepspeed"),
    Placement("fsdp2-cpu", _OPT_CPU + (("params", "host"),), (3,), "fsdp2", cast_on="device"),
)}


def get_placement(optimizer: str | None = None, params: str | None = None, fsdp2: bool = False) -> Placement:
    """The placement of DeepSpeed's `offload_optimizer.device` / `offload_param.device` ("cpu", "nvme" or None), or
    of FSDP2's CPUOffloadPolicy (`fsdp2=True`, which offloads params, grads and the optimizer together)."""
    for name, value in (("optimizer", optimizer), ("params", params)):
        if value not in (None, "none", "cpu", "nvme"):
            raise ValueError(f"offload {name} device must be 'cpu', 'nvme' or None, got {value!r}")
    optimizer = None if optimizer == "none" else optimizer
    params = None if params == "none" else params
    if fsdp2:
        if optimizer or params:
            raise ValueError("FSDP2's CPUOffloadPolicy offloads params, gradients and the optimizer together; give "
                             "it alone, not with DeepSpeed's offload_optimizer / offload_param")
        return PLACEMENTS["fsdp2-cpu"]
    if params and not optimizer:
        raise ValueError("offload_param without offload_optimizer is not modelled: zerosim offloads the params with "
                         "the optimizer (ZeRO-Infinity's configurations); DeepSpeed's stage3.py also runs them alone, "
                         "the optimizer on the GPU: give an optimizer device too")
    if not params:
        return PLACEMENTS["optimizer-cpu" if optimizer == "cpu" else "optimizer-nvme" if optimizer else "none"]
    if params == optimizer:
        return PLACEMENTS[f"params-{params}"]
    return PLACEMENTS[f"params-{params}-optimizer-{optimizer}"]


# What DeepSpeed 0.19.8 runs for its keys where that is not what they say: (stage, key, device) -> (what the device
# becomes, None for no offload; why). Read in stage_1_and_2.py DeepSpeedZeroOptimizer.__init__, whose signature takes
# no offload_param_config (offload_param is read at stage 3 only), and which sets cpu_offload = True for every
# offload_optimizer.device but "none" (the NVMe swappers are stage3.py's).
_IGNORED = "DeepSpeed 0.19.8 reads offload_param at stage 3 only (stage_1_and_2.py takes no offload_param_config)"
_AS_CPU = ("DeepSpeed 0.19.8's stage_1_and_2.py runs every offload_optimizer device but none as CPU offload "
           "(cpu_offload = True): the optimizer states in host memory, nothing on NVMe")
DEEPSPEED_AT_STAGE = {
    (1, "params", "cpu"): (None, _IGNORED),
    (1, "params", "nvme"): (None, _IGNORED),
    (1, "optimizer", "nvme"): ("cpu", _AS_CPU),
    (2, "params", "cpu"): (None, _IGNORED),
    (2, "params", "nvme"): (None, _IGNORED),
    (2, "optimizer", "nvme"): ("cpu", _AS_CPU),
}


def deepspeed_placement(stage: int, optimizer: str | None = None, params: str | None = None) -> tuple:
    """(Placement, notes): what DeepSpeed 0.19.8 runs at ZeRO `stage` for `offload_optimizer.device` = `optimizer` and
    `offload_param.device` = `params` ("cpu", "nvme", "none" or None), and a note for every key it runs otherwise than
    it reads (DEEPSPEED_AT_STAGE). Raises ValueError for what DeepSpeed does not run (stage 0 with an offload) and for
    what zerosim does not model (offload_param without offload_optimizer at stage 3)."""
    from zerosim.parallel.data import get_plan

    get_plan(stage)  # a stage, checked
    get_placement(optimizer, None), get_placement("cpu", params)  # the device names, checked
    optimizer = None if optimizer == "none" else optimizer
    params = None if params == "none" else params
    notes = []
    for key in ("optimizer", "params"):
        device = optimizer if key == "optimizer" else params
        if (stage, key, device) in DEEPSPEED_AT_STAGE:
            becomes, why = DEEPSPEED_AT_STAGE[stage, key, device]
            notes.append(why)
            optimizer, params = (becomes, params) if key == "optimizer" else (optimizer, becomes)
    placement = get_placement(optimizer, params)
    if stage not in placement.stages:  # stage 0: DeepSpeed offloads through its ZeRO optimizers only
        raise ValueError(f"DeepSpeed runs {placement.name} at ZeRO stage {', '.join(map(str, placement.stages))}, not "
                         f"{stage}: it offloads through its ZeRO optimizers (0.19.8 engine.py _configure_optimizer: "
                         "zero_enabled is stage > 0), and at stage 0 nothing is offloaded")
    return placement, tuple(notes)


# The optimizer DeepSpeed 0.19.8 steps on the host once the optimizer is offloaded (engine.py _configure_basic_optimizer
# with zero_use_cpu_optimizer: "Adam" / "AdamW" become DeepSpeedCPUAdam, "Lion" DeepSpeedCPULion; a client optimizer of
# another kind is refused while zero_force_ds_cpu_optimizer keeps its default, true): zerosim's optimizer name -> the
# get_optimizer arguments that make its arithmetic (Lion: zerosim's own; DeepSpeedCPULion's C++ is not transcribed).
DEEPSPEED_CPU_OPTIMIZERS = {"adam": {"formula": "deepspeed-cpu"}, "adamw": {"formula": "deepspeed-cpu"}, "lion": {}}


def host_optimizer(placement: Placement, name: str) -> dict:
    """The get_optimizer arguments for optimizer `name` stepping where `placement` puts it: DeepSpeed's CPU optimizers
    (DEEPSPEED_CPU_OPTIMIZERS) when DeepSpeed offloads it; nothing changed on the device or under FSDP2 (whose policy
    steps the user's own torch optimizer on CPU tensors). Raises ValueError for an optimizer DeepSpeed does not
    offload."""
    if not placement.offloads_optimizer or placement.framework != "deepspeed":
        return {}
    if name not in DEEPSPEED_CPU_OPTIMIZERS:
        raise ValueError(f"DeepSpeed 0.19.8 offloads the optimizer with DeepSpeedCPUAdam or DeepSpeedCPULion only "
                         f"(engine.py _configure_basic_optimizer; zero_force_ds_cpu_optimizer refuses others): "
                         f"{name!r} does not run offloaded; choose {', '.join(DEEPSPEED_CPU_OPTIMIZERS)}")
    return dict(DEEPSPEED_CPU_OPTIMIZERS[name])
