"""The calibrated compute time: each recorded compute split by kernel class and charged at its achieved rate.

    costs = KernelTimes(model, (B, L), parse_efficiency("eager"), Hardware("h100", "nvlink4", "bf16"))
    simulate(cluster.trace, hardware, costs=costs)          # in place of the datasheet roofline

One compute event (a unit's forward, recompute or backward, or the loss) costs

    [ Σ_GEMMs 2MNK / (peak(format) · gemm · wave(M, N))  +  attention FLOPs / (peak(16-bit) · attention_fwd|bwd)
      + memory-bound bytes / (HBM · hbm) ] / framework

with the work from costs/_kernel_work.py, the rates and `framework` from costs/_efficiency.py. A unit of a model
known only by its parameter counts (MetaModel) is all GEMM: its event's FLOPs at the GEMM rate. A tensor-parallel
rank's unit (parallel/tensor) is split the same way, on its slice (costs/_tensor_work.py): its GEMMs' shapes, fp8
where the blocks' linears run in fp8, attention on H/T heads, the norms on L/T tokens with SP. A context-parallel
rank's attention parts (parallel/context) are charged on its L/C tokens, each hop of the ring on the block its rank
computes there (costs/_context_work.py: half a causal diagonal block's pairs; `position(rank)` says which blocks
each rank's event computed). An optimizer step
moves optimizer_bytes_per_element (_cost.py) per element at HBM · hbm / framework. With a flat efficiency (a user's
single number) it is the roofline with every peak derated by it.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.analysis.costs import (
    Efficiency,
    Work,
    cp_unit_work,
    loss_work,
    tp_unit_work,
    unit_work,
    wave_efficiency,
    weights,
)
from zerosim.analysis.timeline._cost import compute_time, optimizer_time
from zerosim.analysis.timeline._devices import DEVICES
from zerosim.models.meta import is_block
from zerosim.precision import get_format

PASSES = ("forward", "recompute", "backward")  # a unit's passes; any other compute (Newton-Schulz) is GEMM FLOPs
# zero bubble's halves of a unit's backward (models/_run.py `_split`): their share of the backward's work, as the
# engine shares its FLOPs — half each for a unit with weights (the paper's T_B = T_W), all to the input's otherwise
SPLIT = {"backward-input": lambda weights: 0.5 if weights else 1.0,
         "backward-weight": lambda weights: 0.5 if weights else 0.0}


def device_key(device) -> str:
    """The DEVICES key of `device` (a Device), by name: what the kernel rates are kept under."""
    for key, d in DEVICES.items():
        if d.name == device.name:
            return key
    raise ValueError(f"no kernel rates for the device {device.name!r} (built by hand): give --efficiency as a "
                     "fraction of its peaks (e.g. 0.45), or add its rates to costs/_efficiency.py KERNEL_RATES")


class KernelTimes:
    """Seconds of each compute event of one model's step on `hardware` under `efficiency`.

    Args:
        model: the meta twin the engine ran (MetaLlama, MetaGPT: units with shapes; MetaModel: counts only).
        micro_batch: (B, L) each micro-step's sequences, or None for a MetaModel.
        efficiency: an `Efficiency` (analysis/costs/_efficiency.py).
        hardware: the `Hardware` the step runs on (its device and compute format).
        fp8_gemms: the blocks' linears in float8 (torchao Float8Linear); the device must have fp8 units.
        loss: the loss kernel ("eager", "chunked", "fused": costs/kernel_work.loss_work).
        position: beside context parallelism, rank -> its position in its CP group, whose blocks its events computed
            (`ContextParallel.position_of`); None: every rank at position 0.
        units: beside a pipeline, for each rank the index in `model` (every stage's whole) of each layer its events
            name (its stage model's units: PipelineEngine.layer_units); None: the events' layers are `model`'s own.
    """

    def __init__(self, model, micro_batch, efficiency: Efficiency, hardware, fp8_gemms: bool = False,
                 loss: str = "eager", position=None, units=None):
        self.model, self.micro, self.efficiency, self.hw = model, micro_batch, efficiency, hardware
        self.fp8, self.loss, self.position = fp8_gemms, loss, position
        self.units = units if units is not None and any(u is not None for u in units) else None
        self.rates = None if efficiency.flat is not None else efficiency.rates(device_key(hardware.device))
        if fp8_gemms and hardware.device.fp8 is None:
            raise ValueError(f"{hardware.device.name} has no fp8 tensor cores: fp8 GEMMs need an H100 or H200")
        self._cache = {}
        self._seconds = {}  # (layer, kind) -> seconds of a unit with shapes: its work and the rates are fixed
        self._core = {}  # layer -> whether it is a CP core unit (its work depends on its rank's position)
        self._tensor = None  # with fp8 GEMMs: parallel/tensor, whose fp8_wire says which calls carry float8, for a
        # TP twin; False for any other model; None until the first call asks
        self._itemsize = {}  # a call's dtype -> its format's bytes an element

    def describe(self) -> str:
        return self.efficiency.describe() + (", fp8 GEMMs in the blocks" if self.fp8 else "")

    # -- the work of an event ------------------------------------------------------------------------------
    def work(self, ev) -> Work | None:
        """The event's work by kernel class, or None for a unit without shapes (a MetaModel's layer); for a CP core
        unit, the blocks its rank computed."""
        key = self._key(ev)
        if key not in self._cache:
            self._cache[key] = self._work(ev, key[2] if len(key) == 3 else 0)
        return self._cache[key]

    def _layer(self, ev) -> int:
        """The index in `model` of the layer the event names (beside a pipeline, its rank's stage's unit); -1 for
        the loss."""
        if self.units is None or ev.layer < 0:
            return ev.layer
        return self.units[ev.rank][ev.layer]

    def _key(self, ev) -> tuple:
        """What an event's work depends on: its unit and pass, and for a CP core unit its rank's position (each
        position computes its own blocks)."""
        i = self._layer(ev)
        core = self._core.get(i)  # asked of every compute a simulation times: the model's layers are fixed
        if core is None:
            core = self._core[i] = i >= 0 and getattr(
                getattr(self.model.layers[i], "unit", None), "cp_part", None) == "core"
        if core:
            return i, ev.kind, 0 if self.position is None else self.position(ev.rank)
        return i, ev.kind

    def _work(self, ev, position: int = 0):
        B, L = self.micro or (None, None)
        i = self._layer(ev)
        if i < 0:  # the loss (beside TP, the vocabulary-parallel one on the rank's V/T columns)
            return loss_work(B * L, self.model.vocab // getattr(self.model, "tp", 1), self.loss) if self.micro else None
        if ev.kind not in PASSES:  # not a unit's pass: Muon's Newton-Schulz, all matrix products (its FLOPs)
            return None
        layer = self.model.layers[i]
        unit = getattr(layer, "unit", None)
        if unit is None or self.micro is None:
            return None
        tensor = _tensor_parallel()
        if tensor is not None and isinstance(layer, tensor.MetaTensorParallelUnit):  # a TP rank's slice, by kernel
            # class (costs/_tensor_work.py)
            m = self.model
            return tp_unit_work(unit, B, L, ev.kind, self.efficiency.kernels, self.fp8, m.tp, m.sequence_parallel)
        if getattr(unit, "cp_part", None) is not None:  # a CP rank's attention part (costs/_context_work.py)
            return cp_unit_work(self.model, unit, B, L, ev.kind, self.efficiency.kernels, self.fp8, position)
        table = any(k in unit.param_shapes for k in ("embed_tokens", "wte"))
        x_shape = (B, L) if table else (B, L, self.model.d_model)
        again = None
        if ev.kind == "recompute" and getattr(self.model, "checkpoint", None) == "op-sac":
            again = {name for i, (name, _) in enumerate(weights(unit)) if i % 2 == 1}  # every second mm recomputed
        return unit_work(unit, x_shape, ev.kind, self.efficiency.kernels, self.fp8 and is_block(unit), again)

    # -- seconds ------------------------------------------------------------------------------------------
    def compute(self, ev) -> float:
        """Seconds of one Compute event."""
        # timed before: a unit's pass (a CP core unit's key holds its position too, a zero-bubble half's is never
        # kept, a flat efficiency keeps none)
        seconds = self._seconds.get((self._layer(ev), ev.kind))
        if seconds is not None:
            return seconds
        dev = self.hw.device
        if self.efficiency.flat is not None:
            f = self.efficiency.flat
            return compute_time(ev.flops, ev.bytes_read + ev.bytes_written, dev.rate(self.hw.compute) * f, dev.hbm * f)
        if ev.kind in SPLIT:  # a zero-bubble half: its share of the unit's backward, kernel class by class
            unit = getattr(self.model.layers[self._layer(ev)], "unit", None) if ev.layer >= 0 else None
            if unit is not None and self.micro is not None:
                whole = replace(ev, kind="backward", needs=(), values=None)
                return SPLIT[ev.kind](bool(getattr(unit, "param_shapes", None))) * self.compute(whole)
        key = self._key(ev)  # the work of (layer, kind) is one `Work` (`work`): its seconds are computed once
        seconds = self._seconds.get(key)  # (a 70B plan times ~12,000 computes of ~100 GEMMs each, 160 distinct)
        if seconds is not None:
            return seconds
        w, r = self.work(ev), self.rates
        if w is None:  # counts only: all of it GEMM work
            return ev.flops / (dev.rate(self.hw.compute) * r.gemm) / self.efficiency.framework
        peak16 = dev.rate(self.hw.compute)
        fmt_peak = dev.fp8 if w.fp8 else peak16
        seconds = self._seconds[key] = work_seconds(w, r, fmt_peak, peak16, dev.hbm) / self.efficiency.framework
        return seconds

    def call_bytes(self, call, sent: float) -> float:
        """The bytes `call` carries for its busiest rank: `sent` as recorded, but with fp8 GEMMs beside tensor
        parallelism the blocks' sequence-parallel all-gathers travel in float8, one byte an element (parallel/
        tensor `fp8_wire`: torchao's Float8 TP styles and Transformer Engine cast before they gather)."""
        if not self.fp8:
            return sent
        tensor = self._tensor
        if tensor is None:  # asked once: a model is a TP twin or not for good (and only once the module is loaded)
            tensor = _tensor_parallel()
            tensor = self._tensor = tensor if tensor is not None and isinstance(
                self.model, tensor.MetaTensorParallelModel) else False
        if tensor and tensor.fp8_wire(call):
            width = self._itemsize.get(call.dtype)
            if width is None:
                width = self._itemsize[call.dtype] = np.dtype(get_format(call.dtype).dtype).itemsize
            return sent / width
        return sent

    def optimizer(self, elements: int, states: int, grad_bytes: int, param_bytes: int) -> float:
        """Seconds of one optimizer step over `elements` (memory-bound)."""
        hbm = self.hw.device.hbm
        if self.efficiency.flat is not None:
            return optimizer_time(elements, states, grad_bytes, param_bytes, hbm * self.efficiency.flat)
        seconds = optimizer_time(elements, states, grad_bytes, param_bytes, hbm * self.rates.hbm)
        return seconds / self.efficiency.framework


def _tensor_parallel():
    """zerosim.parallel.tensor once something has loaded it, else None: its twins (MetaTensorParallelUnit, _Model) are
    made only by that module, so no model is one before it is imported, and a plan without tensor parallelism never
    loads it (its modules are ~0.03 s of the command's start)."""
    import sys

    return sys.modules.get("zerosim.parallel.tensor")


@functools.lru_cache(maxsize=4096)
def work_seconds(w: Work, r, fmt_peak: float, peak16: float, hbm: float) -> float:
    """Seconds of `w` at kernel rates `r` (a KernelRates) on a device whose GEMM format peaks at fmt_peak FLOP/s
    (its 16-bit peak, or its fp8 one for fp8 GEMMs), 16-bit at peak16 and HBM at hbm B/s, before the framework
    factor. Remembered across KernelTimes: a plan's configurations that share a micro-batch (every stage of one
    checkpointing strategy) time the same units' work, ~100 GEMMs each."""
    fmt_eff = r.gemm_fp8 if w.fp8 else r.gemm
    seconds = sum(2.0 * m * n * k / (fmt_peak * fmt_eff * wave_efficiency(m, n, r.sms)) for m, n, k in w.gemms)
    seconds += w.attention_fwd / (peak16 * r.attention_fwd) + w.attention_bwd / (peak16 * r.attention_bwd)
    return seconds + w.memory / (hbm * r.hbm)


@dataclass(frozen=True)
class TimeModel:
    """What a simulated step's computes cost: an efficiency (None: the datasheet roofline), fp8 GEMMs, the loss."""

    efficiency: Efficiency | None = None
    fp8_gemms: bool = False  # the blocks' linears in float8 (torchao Float8Linear): H100 / H200
    loss: str = "eager"  # the loss kernel: "eager", "chunked", "fused"

    def costs(self, model, micro_batch, hardware, position=None, units=None):
        """The `KernelTimes` of one model's step on `hardware`, or None for the roofline (`position`: beside
        context parallelism, rank -> its CP position; `units`: beside a pipeline, each rank's layers in `model`:
        KernelTimes)."""
        if self.efficiency is None:
            if self.fp8_gemms:
                raise ValueError("fp8 GEMMs are charged by the efficiency model: give an efficiency preset, not 'peak'")
            return None
        return KernelTimes(model, micro_batch, self.efficiency, hardware, self.fp8_gemms, self.loss, position, units)

    def gemm_rate(self, hardware) -> float:
        """FLOP/s a large GEMM runs at on `hardware` under this model: the peak, derated (what a model known only by
        its parameter counts computes at; the sweep's hiding bounds use it)."""
        peak = hardware.device.rate(hardware.compute)
        e = self.efficiency
        if e is None:
            return peak
        if e.flat is not None:
            return peak * e.flat
        return peak * e.rates(device_key(hardware.device)).gemm * e.framework

    def flags(self) -> str:
        """The command-line flags that give this model (`--efficiency ...`, `--fp8-gemms`): what a printed command
        that reproduces a time must carry."""
        e = self.efficiency
        if e is None:
            text = "peak"
        elif e.flat is not None:
            text = f"{e.flat:g}"
        else:
            from zerosim.analysis.costs import EFFICIENCY_PRESETS as PRESETS

            extra = [f"{k}={v:g}" for k, v in e.overrides]
            if e.framework != PRESETS[e.name].framework:
                extra.append(f"framework={e.framework:g}")
            text = e.name + (":" + ",".join(extra) if extra else "")
        return f"--efficiency {text}" + (" --fp8-gemms" if self.fp8_gemms else "")

    def describe(self) -> str:
        if self.efficiency is None:
            return "datasheet peaks (roofline: max(FLOPs / peak, bytes / HBM), nothing derated)"
        return self.efficiency.describe() + (", fp8 GEMMs in the blocks" if self.fp8_gemms else "")
