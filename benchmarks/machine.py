"""What a benchmark's numbers depend on: the CPU's bf16 instructions, the BLAS kernels NumPy and torch run, NumPy's
SIMD build. A speed ratio against torch means little without them: torch's bf16 matmul runs natively on a CPU with
AVX512_BF16 or AMX and is emulated (each product through fp32) on one without, and an fp32 GEMM's speed is its BLAS
kernel's.

    cpu_name()             the CPU's name
    cpu_flags()            its feature flags (Linux: /proc/cpuinfo; macOS: sysctl's hw.optional.arm.FEAT_*)
    bf16_class(flags)      which class of CPU for bf16 GEMMs: BF16_CLASSES, one row per class, with its goal
    numpy_blas()           NumPy's BLAS: name, version and the OpenBLAS kernel it runs (numpy_kernels: + its SIMD)
    torch_blas(torch)      torch's BLAS and CPU capability (ATen's dispatch) (torch_kernels: + oneDNN's bf16)
    describe(torch=None)   one line of all of it, for a benchmark's header

Run as a script it prints that line (`.ci/pinned` prints it before each forced kernel).
"""

from __future__ import annotations

import ctypes
import platform
import re
import subprocess
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Bf16Class:
    """A class of CPU as its bf16 GEMMs run, and the goal for zerosim's bf16 ZeRO-3 ÷ torch FSDP2 on it."""

    name: str
    needs: tuple  # flags any one of which puts a CPU in this class
    how: str  # how torch's bf16 GEMMs run there
    goal: float | None  # zerosim ÷ torch, at most; None: no goal (see `why`)
    why: str


BF16_CLASSES = (  # the first whose flag the CPU has; the last needs none
    Bf16Class("AMX-BF16", ("amx_bf16",), "native, on AMX tiles (oneDNN)", None,
              "AMX's tiles multiply bf16 several times faster than fp32 FMAs; zerosim's bf16 products run in fp32"),
    Bf16Class("bf16 dot products", ("avx512_bf16", "bf16"), "native (oneDNN: AVX512_BF16's VDPBF16PS, or Arm's "
              "BFDOT/BFMMLA)", 2.0,
              "one bf16 dot-product instruction does the work of two fp32 FMAs; zerosim widens bf16 to fp32 and runs "
              "fp32 GEMMs (models/layers/_basic.py), so at best about twice torch's time"),
    Bf16Class("no bf16 instructions", (), "emulated (each bf16 product converted to fp32)", 0.5,
              "issue 28's target: torch converts every bf16 product, zerosim widens once and calls fp32 BLAS"),
)


def cpu_flags() -> frozenset:
    """The CPU's feature flags, lower case: Linux's /proc/cpuinfo "flags" (x86) or "Features" (Arm); on macOS the
    FEAT_* names sysctl reports as 1 (FEAT_BF16 -> "bf16"). Empty where neither is readable."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.lower().split())
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            out = subprocess.run(["sysctl", "hw.optional.arm"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return frozenset()
        return frozenset(m.lower() for m in re.findall(r"FEAT_(\w+): 1", out))
    return frozenset()


def bf16_class(flags) -> Bf16Class:
    """The first of BF16_CLASSES whose flags the CPU has (the last, "no bf16 instructions", needs none)."""
    return next(c for c in BF16_CLASSES if not c.needs or any(f in flags for f in c.needs))


def _openblas_core() -> str | None:
    """The kernel OpenBLAS chose at run time (its `get_corename`; OPENBLAS_CORETYPE forces it), or None."""
    try:
        with open("/proc/self/maps") as f:
            libs = sorted(set(re.findall(r"(/\S*openblas\S*\.(?:so|dylib)\S*)", f.read())))
    except OSError:
        return None
    for lib in libs:
        handle = ctypes.CDLL(lib)
        for symbol in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename64_",
                       "openblas_get_corename"):
            fn = getattr(handle, symbol, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return None


def numpy_blas() -> str:
    """e.g. "scipy-openblas 0.3.31.188.0 (SkylakeX kernels)": the BLAS NumPy was built on, the kernel it runs."""
    import numpy as np

    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        name = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # an older NumPy without mode="dicts", or a build without the key
        name = "?"
    core = _openblas_core()
    return name + (f" ({core} kernels)" if core else "")


def numpy_kernels() -> str:
    """e.g. "NumPy 2.4.6, BLAS scipy-openblas 0.3.31.188.0 (SkylakeX kernels), SIMD X86_V2 + X86_V3 X86_V4"."""
    import numpy as np

    from numpy._core import _multiarray_umath as umath
    on = [t for t in umath.__cpu_dispatch__ if umath.__cpu_features__.get(t)]
    simd = " ".join(umath.__cpu_baseline__) + (" + " + " ".join(on) if on else "")
    return f"NumPy {np.__version__}, BLAS {numpy_blas()}, SIMD {simd}"


def torch_blas(torch) -> str:
    """e.g. "mkl, CPU capability AVX512": torch's BLAS and the SIMD level ATen dispatches to."""
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return f"{blas.group(1) if blas else '?'}, CPU capability {torch.backends.cpu.get_cpu_capability()}"


def torch_kernels(torch) -> str:
    """e.g. "torch 2.13.0+cpu, BLAS mkl, CPU capability AVX512, oneDNN bf16 native"."""
    try:
        bf16 = "native" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "emulated"
    except (AttributeError, RuntimeError):
        bf16 = "?"
    return f"torch {torch.__version__}, BLAS {torch_blas(torch)}, oneDNN bf16 {bf16}"


def cpu_name() -> str:
    """The CPU's name: Linux's /proc/cpuinfo "model name", else what platform says."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    return name


def describe(torch=None) -> str:
    """The CPU, its bf16 class, NumPy's kernels and (given torch) torch's, on one line."""
    flags = cpu_flags()
    bf16 = [f for c in BF16_CLASSES for f in c.needs if f in flags]
    line = (f"{cpu_name()}; bf16: {bf16_class(flags).name}" + (f" ({', '.join(bf16)})" if bf16 else "")
            + f"; {numpy_kernels()}")
    return line + (f"; {torch_kernels(torch)}" if torch is not None else "")


if __name__ == "__main__":
    print(describe())
