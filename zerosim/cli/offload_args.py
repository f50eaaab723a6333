"""The flags that offload the optimizer and the parameters, by DeepSpeed's key names and FSDP2's (parallel/offload), and
the host they offload to; `zerosim memory`, `timeline`, `plan` and `train` call these (docs/offload.md).

    --offload-optimizer {cpu,nvme}  DeepSpeed's zero_optimization.offload_optimizer.device: ZeRO-Offload (cpu), ZeRO-
                                    Infinity (nvme: stage 3; at stages 1/2 DeepSpeed runs nvme as cpu, and says so)
    --offload-params {cpu,nvme}     DeepSpeed's zero_optimization.offload_param.device (stage 3, with the optimizer's)
    --offload-policy cpu            FSDP2's fully_shard(offload_policy=CPUOffloadPolicy()): params, gradients and the
                                    optimizer on the host (stage 3)
    --dpu [WARMUP]                  the ZeRO-Offload paper's one-step delayed parameter update (timeline, train)
    --host NAME                     the machine type: host DRAM and NVMe per node, its GPUs' host link, its DRAM
                                    bandwidth (analysis/costs/_hosts.py: dgx-2, dgx-a100-320gb, dgx-a100, dgx-h100,
                                    dgx-h200; default the one whose GPU is --gpu, else dgx-h100)
    --host-memory GB, --host-nvme GB  set the node's DRAM / NVMe (what `free -b` and `df` say on yours)
    --pcie LINK, --host-bandwidth GB/s  the copies' link and one rank's CPU-optimizer bandwidth (timeline, plan)

A DeepSpeed config's offload_optimizer / offload_param (--ds-config) set the same, and a flag beside them is refused.
`plan` takes lists (--offload-optimizer cpu,nvme) and ranks every configuration beside no offload.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, replace

DEVICES = ("cpu", "nvme")
PCIE = ("pcie3", "pcie4", "pcie5")
HOST_FLAGS = ("--host", "--host-memory", "--host-nvme", "--pcie", "--host-bandwidth")  # read only with offload


def add_offload_arguments(p, dpu: bool = False, times: bool = False, several: bool = False, host: bool = True) -> None:
    """The offload flags; `dpu`: --dpu (a run that steps); `times`: --pcie and --host-bandwidth (a run that is timed);
    `several`: comma-separated lists, every combination tried (the planner); `host`: --host and its sizes."""
    from zerosim.cli.choices import HOSTS

    g = p.add_argument_group("offload (DeepSpeed's offload_optimizer / offload_param, FSDP2's CPUOffloadPolicy; "
                             "docs/offload.md)")
    word = "s, comma-separated" if several else ""
    g.add_argument("--offload-optimizer", default=None, metavar="{cpu,nvme}" + (",..." if several else ""),
                   help="DeepSpeed's zero_optimization.offload_optimizer.device: the fp32 master, the optimizer state "
                        f"and its step on the host (cpu: ZeRO-Offload) or on NVMe (nvme: ZeRO-Infinity){word}")
    g.add_argument("--offload-params", default=None, metavar="{cpu,nvme}" + (",..." if several else ""),
                   help="DeepSpeed's zero_optimization.offload_param.device: the 16-bit parameter shards too "
                        f"(stage 3, with --offload-optimizer){word}")
    g.add_argument("--offload-policy", choices=("cpu",), default=None,
                   help="FSDP2's fully_shard(offload_policy=CPUOffloadPolicy()): parameters, gradients and the "
                        "optimizer on the host, the parameters copied to the device before each all-gather (stage 3)")
    if dpu:
        g.add_argument("--dpu", nargs="?", type=int, const=0, default=None, metavar="WARMUP",
                       help="the ZeRO-Offload paper's delayed parameter update: each step runs on the parameters of "
                            "the update before the last while the CPU steps; after WARMUP steps without it (default 0)")
    if not host:
        return
    g.add_argument("--host", choices=tuple(HOSTS), default=None,
                   help="the machine type whose host memory and NVMe per node the ranks share (default: the one whose "
                        "GPU is --gpu, else dgx-h100: 2 TB DRAM and 30.72 TB NVMe per 8-GPU node)")
    g.add_argument("--host-memory", type=float, default=None, metavar="GB",
                   help="host DRAM per node, GB (1e9 bytes): what your nodes have (`free -b`)")
    g.add_argument("--host-nvme", type=float, default=None, metavar="GB", help="NVMe for data per node, GB")
    if times:
        g.add_argument("--pcie", choices=PCIE, default=None,
                       help="the device <-> host link (default the slower PCIe of --gpu and the host's: a link trains "
                            "at the fastest generation both ends support)")
        g.add_argument("--host-bandwidth", type=float, default=None, metavar="GB/s",
                       help="host memory bandwidth one rank's CPU optimizer streams at (default: the host's DRAM peak "
                            "shared by the ranks of a node; set it from a measured DeepSpeedCPUAdam step)")


@dataclass(frozen=True)
class Request:
    """The offload configurations asked for: ((offload_optimizer, offload_param, FSDP2's policy), ...)."""

    configs: tuple  # ((optimizer device or None, param device or None, fsdp2: bool), ...)
    dpu: bool = False
    warmup: int = 0
    fixed: object = None  # the Placement a DeepSpeed config runs at its own stage (--ds-config), else None

    def offload(self, config: tuple, stage: int) -> tuple:
        """(Offload, notes) of `config` at `stage`: DeepSpeed's keys as DeepSpeed 0.19.8 runs them there
        (parallel/offload deepspeed_placement), FSDP2's policy at stage 3. Raises ValueError where nothing runs."""
        from zerosim.parallel.offload import PLACEMENTS, Offload, deepspeed_placement

        optimizer, params, fsdp2 = config
        if self.fixed is not None:
            placement, notes = self.fixed, ()
        elif fsdp2:
            placement, notes = PLACEMENTS["fsdp2-cpu"], ()
            if stage not in placement.stages:
                raise ValueError("--offload-policy cpu is FSDP2's fully_shard, which shards the parameters: stage 3")
        else:
            placement, notes = deepspeed_placement(stage, optimizer, params)
        return Offload(placement=placement, dpu=self.dpu, dpu_warmup=self.warmup), notes

    def stages(self, config: tuple, stages) -> tuple:
        """Those of `stages` where `config` runs (a stage where it does not: left out; none at all: refused)."""
        ok = []
        for stage in stages:
            try:
                self.offload(config, stage)
            except ValueError as e:
                why = e
                continue
            ok.append(stage)
        if not ok:
            raise why
        return tuple(ok)


def label(config: tuple) -> str:
    """The configuration by its framework's names: "offload_optimizer cpu", "... + offload_param nvme",
    "CPUOffloadPolicy"."""
    optimizer, params, fsdp2 = config
    if fsdp2:
        return "FSDP2 CPUOffloadPolicy"
    return f"offload_optimizer {optimizer}" + (f" + offload_param {params}" if params else "")


def offload_request(args, ds=None, several: bool = False) -> Request | None:
    """The offload the flags (or a DeepSpeed config) ask for, checked; None when none is. `several`: lists allowed."""
    listed = lambda v: () if v is None else tuple(x.strip() for x in v.split(","))  # noqa: E731
    optimizers, params = listed(args.offload_optimizer), listed(args.offload_params)
    for flag, values in (("--offload-optimizer", optimizers), ("--offload-params", params)):
        bad = [v for v in values if v not in DEVICES]
        if bad:
            raise ValueError(f"{flag} takes cpu or nvme (DeepSpeed's offload device), got {bad[0]!r}")
    fsdp2, dpu = args.offload_policy is not None, getattr(args, "dpu", None)
    given = optimizers or params or fsdp2
    if ds is not None and ds.offload is not None and given:
        raise ValueError("--offload-optimizer / --offload-params / --offload-policy and --ds-config's "
                         "zero_optimization.offload_optimizer / offload_param both set the offload: drop the flags or "
                         "edit the config")
    if ds is not None and fsdp2:  # DeepSpeed's config runs DeepSpeed's ZeRO optimizer: FSDP2's policy is not in it
        raise ValueError("--offload-policy cpu is FSDP2's CPUOffloadPolicy (torch's fully_shard); --ds-config "
                         "describes a DeepSpeed run, which offloads through its own zero_optimization."
                         "offload_optimizer / offload_param: set those in the config, or drop --ds-config")
    if params and not optimizers:
        raise ValueError("--offload-params offloads the parameter shards with the optimizer (ZeRO-Infinity): add "
                         "--offload-optimizer cpu or nvme")
    if fsdp2 and (optimizers or params):
        raise ValueError("--offload-policy cpu is FSDP2's CPUOffloadPolicy (parameters, gradients and optimizer "
                         "together); --offload-optimizer / --offload-params are DeepSpeed's: give one or the other")
    if dpu is not None and dpu < 0:
        raise ValueError(f"--dpu's warm-up is a number of steps >= 0, got {dpu}")
    if ds is not None and ds.offload is not None:
        return Request(((None, None, False),), dpu is not None, dpu or 0, ds.offload)
    if not given:
        if dpu is not None:
            raise ValueError("--dpu delays the CPU's update of an offloaded optimizer: add --offload-optimizer cpu")
        host = [f for f in HOST_FLAGS if getattr(args, f[2:].replace("-", "_"), None) is not None]
        if host:  # they describe the host an offloaded run uses: without offload nothing reads them
            raise ValueError(f"{', '.join(host)} describe{'s' if len(host) == 1 else ''} the host an offloaded run "
                             "copies to and steps on; nothing is offloaded here: add --offload-optimizer cpu (or "
                             "nvme, or --offload-policy cpu), or drop " + ("it" if len(host) == 1 else "them"))
        return None
    if (len(optimizers) > 1 or len(params) > 1) and not several:
        raise ValueError("--offload-optimizer and --offload-params take one device here (zerosim plan tries several)")
    configs = ((None, None, True),) if fsdp2 else tuple(  # the planner tries each optimizer device without params too
        (o, p, False) for o in optimizers for p in ((None,) + params if several else params or (None,)))
    return Request(configs, dpu is not None, dpu or 0)


# -- the host -----------------------------------------------------------------------------------------------------
def host_from_args(args, gpu=None):
    """The Host: --host, else the host whose GPUs are `gpu` (a costs.GPU), else the DGX H100; --host-memory and
    --host-nvme (GB) set."""
    from zerosim.analysis.costs import get_host, host_of

    host = get_host(args.host) if args.host is not None else host_of(gpu)
    for flag, v in (("--host-memory", args.host_memory), ("--host-nvme", args.host_nvme)):
        if v is not None and not (v > 0 and v < 1e9):
            raise ValueError(f"{flag} is GB (1e9 bytes) per node, more than 0, got {v!r}")
    if args.host_memory is None and args.host_nvme is None:
        return host
    return host.with_memory(None if args.host_memory is None else args.host_memory * 1e9,
                            None if args.host_nvme is None else args.host_nvme * 1e9)


def offload_hardware(args, hardware, host, ranks_per_node: int, gpu=None):
    """`hardware` on `host` (Hardware.on_host): the copies over --pcie, else the slower PCIe of `gpu` and the host;
    one rank's CPU bandwidth --host-bandwidth GB/s, else the host's DRAM peak shared by `ranks_per_node`."""
    from zerosim.analysis.costs import LINK_GB_S, check_flag_range

    bandwidth = getattr(args, "host_bandwidth", None)
    if bandwidth is not None:  # physical bounds, each end said (analysis/costs/_rates.py)
        check_flag_range(bandwidth, "--host-bandwidth", LINK_GB_S)
    return hardware.on_host(host, ranks_per_node, gpu, pcie=getattr(args, "pcie", None),
                            host_bandwidth=None if bandwidth is None else bandwidth * 1e9)


# -- zerosim memory -----------------------------------------------------------------------------------------------
def offload_memory_rows(rows: list, req: Request, params: int, ranks: int, precision: str, optimizer: str, host,
                        gpus_per_node: int | None) -> dict:
    """Each measured row (measure_by_stage's, with "host" and "nvme") given its hand formulas by tier
    (parallel/offload offload_memory) and the node's verdict (costs host_fit); the row's "formula" becomes the
    device tier's. Returns the report's "offload" block."""
    from zerosim.analysis.costs import GB, OPTIMIZER_STATES, MemoryConfig, host_fit, model_state_memory
    from zerosim.parallel.offload import offload_memory

    config = req.configs[0]
    m = MemoryConfig.for_precision(precision, optimizer=optimizer)
    for row in rows:
        off, notes = req.offload(config, row["stage"])
        hand = offload_memory(params, ranks, row["stage"], off.placement, m.param_bytes, m.grad_bytes,
                              OPTIMIZER_STATES[optimizer].states, m.master_bytes, off.dpu)
        without = model_state_memory(params, ranks, row["stage"], replace(m, padding="all")).total  # all on device
        row["formula"] = hand.tiers["device"]
        row["formula_total"] = row["formula_unpadded_total"] = hand.total("device")
        peaks = {"host": row["host"]["peak"], "nvme": row["nvme"]["peak"]}
        row["offload"] = {"placement": off.placement.name, "notes": list(notes), "formula": hand.tiers,
                          "fit": host_fit(peaks, ranks, host, gpus_per_node), "device_without": without}
    return {"configuration": label(config) if req.fixed is None else f"the DeepSpeed config's ({req.fixed.name})",
            "dpu": req.dpu, "host": {"key": host.key, "name": host.name, "memory": host.memory, "nvme": host.nvme,
                                     "gpus": host.gpus, "source": host.source}, "gb": GB}


def offload_lines(r: dict) -> list:
    """`zerosim memory`'s offload block: per stage, each tier's measured bytes beside the hand formula, and the node."""
    from zerosim.analysis.costs import GB

    o = r.get("offload")
    if not o:
        return []
    h = o["host"]
    head = (f"Offload: {o['configuration']}" + (", DPU" if o["dpu"] else "") + f"; host: {h['name']}, "
            f"{h['memory'] / 1e12:.2f} TB DRAM and {h['nvme'] / 1e12:.2f} TB NVMe per node.")
    lines = ["", *textwrap.wrap(head, 116),
             "Per-rank GB by tier at rest after the step (the ledgers), each beside its hand formula (parallel/",
             "offload); w/o: the device's model states without offload (formula); host peak: the most at once;",
             "per node: the peaks times the ranks on a node, against the node's DRAM and NVMe.",
             f"{'stage':5s} {'placement':15s} {'device':>7s} {'(form.)':>7s} {'w/o':>7s} {'host':>7s} {'(form.)':>7s} "
             f"{'peak':>7s} {'nvme':>7s} {'(form.)':>7s}  per node: host, nvme"]
    for row in r["stages"]:
        x = row["offload"]
        f, fit = x["formula"], x["fit"]
        tier = lambda t: sum(row[t]["resting"].values()) / GB  # noqa: E731
        word = lambda t: (f"{fit[t]['per_node'] / 1e12:.2f} TB " + ("fits" if fit[t]["fits"] else  # noqa: E731
                          f"does NOT fit ({-fit[t]['margin'] / 1e12:.2f} TB short)"))
        lines.append(f"{row['stage']:<5d} {x['placement']:15s} {sum(row['resting'].values()) / GB:7.2f} "
                     f"{sum(f['device'].values()) / GB:7.2f} {x['device_without'] / GB:7.2f} {tier('host'):7.2f} "
                     f"{sum(f['host'].values()) / GB:7.2f} {row['host']['peak'] / GB:7.2f} {tier('nvme'):7.2f} "
                     f"{sum(f['nvme'].values()) / GB:7.2f}  x{fit['ranks_per_node']}: {word('host')}, {word('nvme')}")
    notes = sorted({n for row in r["stages"] for n in row["offload"]["notes"]})
    lines += [line for n in notes for line in textwrap.wrap(n, 116, initial_indent="  note: ",
                                                              subsequent_indent="        ")]
    lines.append("  The host's peak adds the fp32 gradient the CPU optimizer reads (grad32) to what rests there; "
                 "the GPU's")
    lines.append("  verdict below judges the device tier.")
    return lines


# -- zerosim timeline ---------------------------------------------------------------------------------------------
def offload_steps(req: Request | None) -> int:
    """Steps a timed offload run takes: 2 with DPU (its copy carries the step before's update: the steady state is
    the second step), else 1."""
    return 2 if req is not None and req.dpu else 1


def offload_timeline(r: dict, result, engine, offload, notes, host) -> None:
    """`zerosim timeline`'s report `r` read for the last step only (timeline step_window) and given the offload block:
    each stream's busy time, what compute did not cover, the bytes each link carried for one rank."""
    from zerosim.analysis.timeline import step_window
    from zerosim.cluster import TRANSFERS

    w = step_window(result)
    trace, last = engine.cluster.trace, w.step
    moved = {}
    for e in trace.events:
        if e.collective in TRANSFERS and e.src == 0 and trace.calls[e.call].step == last:
            moved[e.collective] = moved.get(e.collective, 0) + e.bytes
    step, comm = r["step_s"], w.busy["comm"]
    r.update(compute_s=w.busy["compute"], comm_s=comm, exposed_comm_s=w.uncovered["comm"],
             overlapped_s=comm - w.uncovered["comm"],
             busy_fraction={"compute": w.busy["compute"] / step if step else 0.0, "comm": comm / step if step else 0.0},
             by_purpose=result.comm_by_purpose(0, step=last))
    hw, ledger = result.hardware, engine.cluster.ranks[0].ledger_of("host")
    r["offload"] = {
        "placement": offload.placement.name, "dpu": offload.dpu, "notes": list(notes), "host": host.name,
        "pcie": hw.pcie.name, "nvme_link": hw.nvme.name, "host_bandwidth": hw.host_bandwidth, "steps_simulated":
        len(result.step_times), "busy_s": dict(w.busy), "uncovered_s": dict(w.uncovered), "idle_s": w.idle,
        "bytes": moved, "host_peak": ledger.peak(), "nvme_peak": engine.cluster.ranks[0].ledger_of("nvme").peak()}


def offload_timeline_lines(r: dict) -> list:
    """The offload block of `zerosim timeline`: the host's streams in the step, and what the device waited for."""
    from zerosim.analysis.costs import GB

    o = r.get("offload")
    if not o:
        return []
    ms = lambda s: f"{s * 1e3:10.2f} ms" if s < 1 else f"{s:10.3f} s "  # noqa: E731
    b, u = o["busy_s"], o["uncovered_s"]
    lines = ["", *textwrap.wrap(f"offload: {o['placement']}" + (" with DPU" if o["dpu"] else "") +
                                f"; {o['host']}'s host; copies over {o['pcie']} and {o['nvme_link']}; the CPU "
                                f"optimizer at {o['host_bandwidth'] / 1e9:.1f} GB/s of host memory bandwidth"
                                + (f" (the second of {o['steps_simulated']} steps: DPU's steady state)"
                                   if o["steps_simulated"] > 1 else ""), 116),
             f"  {'stream':8s} {'busy':>13s} {'while the device computed nothing':>35s}   bytes one rank moved"]
    for stream, moved in (("cpu", ()), ("pcie", ("d2h", "h2d")), ("nvme", ("nvme_read", "nvme_write"))):
        words = ", ".join(f"{k} {o['bytes'].get(k, 0) / GB:.3f} GB" for k in moved)
        lines.append(f"  {stream:8s} {ms(b.get(stream, 0.0))} {ms(u.get(stream, 0.0)):>35s}   {words}")
    lines.append(f"  the device's compute stream idled {ms(o['idle_s']).strip()} of the step; host peak "
                 f"{o['host_peak'] / GB:.2f} GB, NVMe {o['nvme_peak'] / GB:.2f} GB per rank")
    lines += [line for n in o["notes"] for line in textwrap.wrap(n, 116, initial_indent="  note: ",
                                                                  subsequent_indent="        ")]
    return lines


# -- zerosim plan -------------------------------------------------------------------------------------------------
def plan_offloads(args) -> tuple:
    """The planner's ((label, at(stage)), ...): every configuration the flags name (comma lists: all combinations)."""
    req = offload_request(args, several=True)
    if req is None:
        return ()
    def at(stage, c):
        off = req.offload(c, stage)[0]
        return off.placement.name, (off,)

    return tuple((label(c), lambda stage, c=c: at(stage, c)) for c in req.configs)


# A placement (parallel/offload PLACEMENTS) by the flags that ask for it
PLACEMENT_FLAGS = {
    "optimizer-cpu": "--offload-optimizer cpu",
    "optimizer-nvme": "--offload-optimizer nvme",
    "params-cpu": "--offload-optimizer cpu --offload-params cpu",
    "params-nvme": "--offload-optimizer nvme --offload-params nvme",
    "params-cpu-optimizer-nvme": "--offload-optimizer nvme --offload-params cpu",
    "params-nvme-optimizer-cpu": "--offload-optimizer cpu --offload-params nvme",
    "fsdp2-cpu": "--offload-policy cpu",
}


def offload_flags(placement: str, args) -> str:
    """The flags that run `placement` (a plan row's), the host's included; "" for "none"."""
    if placement == "none":
        return ""
    words = [PLACEMENT_FLAGS[placement]]
    for flag, value in (("--host", args.host), ("--host-memory", args.host_memory), ("--host-nvme", args.host_nvme),
                        ("--pcie", args.pcie), ("--host-bandwidth", args.host_bandwidth)):
        if value is not None:
            words.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    return " " + " ".join(words)


def offload_plan_lines(r: dict, top: int) -> list:
    """Below the planner's table, with offload tried: the host and NVMe bytes of its printed offload rows."""
    from zerosim.analysis.costs import GB
    from zerosim.cluster import gb

    s = r["settings"]
    if "offloads" not in s:
        return []
    # the node the rows were judged on, --host-memory / --host-nvme set (the preset's key alone would lose them)
    host, rows = s["host_node"], [(i, x) for i, x in enumerate(r["fitting"][:top], 1) if x["offload"] != "none"]
    per_node = min(s["ranks"], s["gpus_per_node"])
    lines = ["", *textwrap.wrap(f"Offload tried beside none: {', '.join(s['offloads'])}, on {host['name']} nodes "
                                f"({gb(host['memory'])} DRAM, {gb(host['nvme'])} NVMe; {per_node} "
                                "ranks a node). Host and NVMe per rank at their peaks:", 116)]
    lines += [f"{i:>2d}  host {x['host_peak'] / GB:8.2f} GB   NVMe {x['nvme_peak'] / GB:8.2f} GB" for i, x in rows]
    # each placement's fastest row, where the printed ones hold none of it: offload against more GPUs at a glance
    shown, best = {x["offload"] for _, x in rows}, {}
    for i, x in enumerate(r["fitting"], 1):
        if x["offload"] not in shown and x["offload"] != "none":
            best.setdefault(x["offload"], (i, x))
    if best:
        lines.append("  the fastest row of each placement not printed above (--top, or --json for all):")
    lines += [f"{i:>2d}  host {x['host_peak'] / GB:8.2f} GB   NVMe {x['nvme_peak'] / GB:8.2f} GB   {label}: ZeRO-"
              f"{x['stage']} {x['strategy']} {x['micro_batch']} × {x['accumulation']}, {x['step_s']:.2f} s a step"
              for label, (i, x) in best.items()]
    return lines


# -- zerosim train ------------------------------------------------------------------------------------------------
def train_offload(args, stage: int):
    """The Offload `zerosim train` runs at `stage` (None without offload flags); its notes are refused here: a run
    that trains says what it runs, so a key DeepSpeed would run otherwise (NVMe at stages 1/2) is an error."""
    req = offload_request(args)
    if req is None:
        return None
    offload, notes = req.offload(req.configs[0], stage)
    if notes:
        raise ValueError(f"at ZeRO-{stage}: {notes[0]}; give what runs (e.g. --offload-optimizer cpu)")
    return offload
