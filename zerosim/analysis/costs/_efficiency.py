"""Achieved rates: the fraction of a GPU's datasheet peak each class of kernel reaches, and the framework presets.

A datasheet peak is a ceiling no training step reaches. The time model (timeline/_kernel_time.py) charges every
recorded compute by kernel class, each at its achieved rate on the device:

    class       what runs there                                   achieved rate
    gemm        nn.Linear's product and its two backward ones     peak(format) · gemm · wave(M, N)
    attention   the flash kernel's forward and backward           peak(16-bit) · attention_fwd / attention_bwd
    memory      norms, activations, rotary, residual adds, casts  HBM bandwidth · hbm
    optimizer   the fused update over a shard (memory-bound)      HBM bandwidth · hbm

and divides the sum by `framework`: the fraction of those kernel-benchmark rates a whole training step sustains
(launch gaps, the Python and FSDP hooks between kernels, clocks under sustained load). `framework` is the one number
fitted to measured runs, per preset, on the calibration set only (analysis/costs/_calibration.py).

Defaults, per GPU, from published kernel measurements (cited per row of KERNEL_RATES):

    gemm        Maximum Achievable Matmul FLOPS, bf16 and fp8 (stas00/ml-engineering at 744d01e,
                compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison table"): A100 SXM
                271.2 of 312 TFLOPS (0.869), H100 SXM 794.5 of 989 (0.803, "H200 is the same"); fp8 H100 1402.6
                of 1979 (0.709), H200 1453.4 of 1979 (0.734)
    attention   FlashAttention-2 (torch's SDPA flash backend): "50-73% of the theoretical maximum FLOPs/s on A100"
                (Dao 2023, arXiv 2307.08691, abstract): the forward at the top, the backward at the bottom;
                "only 35% utilization on H100" (Shah et al. 2024, FlashAttention-3, arXiv 2407.08608, abstract)
    hbm         te42kyfo/gpu-benches at 1c36d50, gpu-stream, the "scale" kernel (one load and one store stream, as
                an elementwise op) at full occupancy: A100 40GB 1381 of 1555 GB/s (0.888), A100 80GB 1732 of 2039
                (0.849), H100 PCIe 1704 of 2000 (0.852; no SXM entry: taken for the H100 SXM too), H200 3165 of
                4800 (0.659)

Presets (PRESETS): "eager" — every op its own kernel, as plain PyTorch and HF Transformers run (the memory class
moves the eager bytes: _kernel_work.py); "compiled" — torch.compile's fused elementwise kernels (fewer bytes);
"peak" — the datasheet roofline, nothing derated (what zerosim charged before this model). A user's own number
(`--efficiency 0.45`) derates the roofline: every FLOP at 45 % of peak, every byte at 45 % of HBM bandwidth.
"""

from __future__ import annotations

from dataclasses import replace

from zerosim._dataclass import dataclass
from zerosim.analysis.costs._calibration import FRAMEWORK
from zerosim.analysis.costs._rates import EFFICIENCY, check_rate


@dataclass(frozen=True)
class KernelRates:
    """One GPU's achieved fractions of its datasheet peaks, by kernel class (see the module docstring)."""

    gemm: float  # 16-bit GEMMs at their best shapes: MAMF / dense peak
    gemm_fp8: float | None  # float8 e4m3 GEMMs: MAMF / dense fp8 peak; None where the GPU has no fp8 units
    attention_fwd: float  # the flash kernel's forward, of the 16-bit dense peak (causal FLOPs: half the tiles)
    attention_bwd: float  # its backward
    hbm: float  # a streaming elementwise kernel's bandwidth / the datasheet HBM bandwidth
    sms: int  # streaming multiprocessors: a GEMM's tiles run in waves of this many
    source: str

    def __post_init__(self):  # fractions every kernel's time divides by: finite and > 0 (_rates.py)
        for name in ("gemm", "gemm_fp8", "attention_fwd", "attention_bwd", "hbm", "sms"):
            if name != "gemm_fp8" or self.gemm_fp8 is not None:
                check_rate(getattr(self, name), f"kernel rates' {name}")


# (device key of zerosim.analysis.timeline.DEVICES) -> what its kernels reach; see the module docstring for each source
KERNEL_RATES = {
    "a100": KernelRates(0.869, None, 0.73, 0.50, 0.849, 108,
                        "MAMF A100 SXM 271.2/312; FA-2 abstract 50-73 % on A100; gpu-benches a100_80 scale 1732/2039"),
    "a100-40gb": KernelRates(0.869, None, 0.73, 0.50, 0.888, 108,
                             "MAMF A100 SXM 271.2/312; FA-2 abstract; gpu-benches a100_40 scale 1381/1555"),
    "h100": KernelRates(0.803, 0.709, 0.35, 0.35, 0.852, 132,
                        "MAMF H100 SXM 794.5/989, fp8 1402.6/1979; FA-3 abstract (FA-2: 35 % on H100); "
                        "gpu-benches h100_pcie scale 1704/2000"),
    # torchtitan's Grand Teton H100 (96 GB HBM2e, 500 W): the H100's die, so its fractions; its own peaks
    # (analysis/timeline/_devices.py)
    "h100-hbm2e": KernelRates(0.803, 0.709, 0.35, 0.35, 0.852, 132,
                              "the H100 SXM's fractions (same GH100 die), of this card's own peaks"),
    "h200": KernelRates(0.803, 0.734, 0.35, 0.35, 0.659, 132,
                        "MAMF 'H200 is the same' as H100 (bf16), fp8 1453.4/1979; FA-3 abstract; "
                        "gpu-benches h200 scale 3165/4800"),
    # no published MAMF or stream numbers for the RTX 3090 in these sources: the A100's fractions, said so
    "rtx3090": KernelRates(0.869, None, 0.73, 0.50, 0.849, 82, "no measurement of its own: the A100's fractions"),
    # nor for the V100 (80 SMs): the A100's fractions, said so
    "v100": KernelRates(0.869, None, 0.73, 0.50, 0.849, 80, "no measurement of its own: the A100's fractions"),
}

TILE = 128  # a GEMM's output tile edge (cuBLAS's large-problem tiles are 128 or 256 wide): ⌈M/128⌉·⌈N/128⌉ tiles


def wave_efficiency(m: int, n: int, sms: int) -> float:
    """The fraction of the last wave a GEMM's output tiles fill: tiles / (waves · SMs), tiles = ⌈M/128⌉·⌈N/128⌉.
    Large training GEMMs are within a few per cent of 1; a small one (a few tiles) leaves most SMs idle."""
    tiles = -(-int(m) // TILE) * -(-int(n) // TILE)
    waves = -(-tiles // sms)
    return tiles / (waves * sms)


@dataclass(frozen=True)
class Efficiency:
    """What the time model assumes: a preset's kernel rates and framework factor, or a user's flat fraction.

    `name` is what every printed time says it came from. `kernels` names the elementwise traffic model
    ("eager" or "compiled", analysis/costs/_kernel_work.py). With `flat` set, every FLOP runs at flat · peak and every
    byte at flat · HBM bandwidth (the roofline derated: a user's own measured efficiency), and nothing else is used.
    """

    name: str
    kernels: str = "eager"  # whose elementwise bytes: "eager" (op by op) or "compiled" (fused)
    framework: float = 1.0  # the fraction of kernel-benchmark speed a whole step sustains (calibrated per preset)
    flat: float | None = None  # a single fraction for everything (--efficiency 0.45), or None
    overrides: tuple = ()  # ((KernelRates field, value), ...) the user set (--efficiency eager:gemm=0.7)

    def __post_init__(self):  # where an efficiency is born: every time divides by it (_rates.py)
        check_rate(self.framework, "efficiency's framework factor")
        if self.flat is not None:
            check_rate(self.flat, "efficiency's flat fraction")
        for key, value in self.overrides:
            check_rate(value, f"efficiency's {key}")

    def rates(self, device: str) -> KernelRates:
        """The kernel rates on `device` (a DEVICES key), with the user's overrides."""
        base = KERNEL_RATES.get(device)
        if base is None:
            raise ValueError(f"no kernel rates for device {device!r}; known: {', '.join(KERNEL_RATES)}")
        return replace(base, **dict(self.overrides)) if self.overrides else base

    def describe(self) -> str:
        """One line saying what produced a time (printed beside every time and throughput)."""
        if self.flat is not None:
            return f"efficiency {self.flat:g} of every datasheet peak (user-set roofline derate)"
        extra = "".join(f", {k}={v:g}" for k, v in self.overrides)
        return (f"efficiency preset '{self.name}': kernel rates from published benchmarks (costs/_efficiency.py), "
                f"{self.kernels} elementwise kernels, framework factor {self.framework:.3f} (calibrated){extra}")


PRESETS = {
    # plain PyTorch / HF Transformers: every elementwise op its own kernel; FSDP2's hooks in Python
    "eager": Efficiency("eager", "eager", FRAMEWORK["eager"]),
    # torch.compile on each block (torchtitan's --training.compile): Inductor's fused elementwise kernels
    "compiled": Efficiency("compiled", "compiled", FRAMEWORK["compiled"]),
}
RATE_FIELDS = ("gemm", "gemm_fp8", "attention_fwd", "attention_bwd", "hbm")
DEFAULT = "eager"  # what a user of plain PyTorch or HF Transformers runs: torch.compile is opt-in


def parse_efficiency(text) -> Efficiency | None:
    """`--efficiency`: a preset ("eager", "compiled"), "peak" (the datasheet roofline: None), a fraction in (0, 1]
    ("0.45": every peak derated), or a preset with overrides ("eager:gemm=0.7,hbm=0.8,framework=0.9")."""
    if isinstance(text, Efficiency) or text is None:
        return text
    text = str(text).strip()
    if text == "peak":
        return None
    try:
        flat = float(text)
    except ValueError:
        flat = None
    if flat is not None:
        if not EFFICIENCY.low <= flat <= EFFICIENCY.high:  # NaN too; the floor: _rates.py
            raise ValueError(f"--efficiency {text}: a fraction of the datasheet peaks must lie in "
                             f"[{EFFICIENCY.low:g}, 1] ({EFFICIENCY.why})")
        return Efficiency(f"{flat:g} of peak", flat=flat)
    name, _, rest = text.partition(":")
    if name not in PRESETS:
        raise ValueError(f"--efficiency {text!r}: choose a preset ({', '.join(PRESETS)}), 'peak', a fraction such as "
                         "0.45, or a preset with overrides such as eager:gemm=0.7,hbm=0.8")
    chosen, overrides, framework = PRESETS[name], [], None
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in (*RATE_FIELDS, "framework"):
            raise ValueError(f"--efficiency {text!r}: {item!r} is not FIELD=VALUE with FIELD one of "
                             f"{', '.join((*RATE_FIELDS, 'framework'))}")
        try:
            v = float(value)
        except ValueError:
            raise ValueError(f"--efficiency {text!r}: {key}={value!r} is not a number") from None
        if not EFFICIENCY.low <= v <= EFFICIENCY.high:  # NaN too; the floor: _rates.py
            raise ValueError(f"--efficiency {text!r}: {key}={value} must lie in [{EFFICIENCY.low:g}, 1] "
                             f"({EFFICIENCY.why})")
        if key == "framework":
            framework = v
        else:
            overrides.append((key, v))
    return replace(chosen, overrides=tuple(overrides), **({"framework": framework} if framework else {}))
