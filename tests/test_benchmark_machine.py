"""benchmarks/machine.py and peers.py say what a speed ratio depends on: the CPU's bf16 class (with the goal for that
class), the BLAS kernels of both sides, and NumPy's SIMD build. Issue 33: torch's bf16 matmul is native on an
AVX512_BF16 CPU, so a bf16 ratio measured there and one measured on an AVX2 CPU are different claims."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import HANG_TIMEOUT

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import machine  # noqa: E402
import peers  # noqa: E402

CLASSES = [  # (flags, the class, its goal for zerosim's bf16 ZeRO-3 ÷ torch FSDP2)
    ({"avx2", "fma"}, "no bf16 instructions", 0.5),  # an AVX2 CPU: torch converts every bf16 product
    ({"avx512f", "avx512_bf16"}, "bf16 dot products", 2.0),  # Cooper Lake, Zen 4/5: VDPBF16PS
    ({"fp", "asimd", "bf16"}, "bf16 dot products", 2.0),  # an Arm CPU with FEAT_BF16 (Graviton 3, Apple M2)
    ({"avx512_bf16", "amx_bf16", "amx_tile"}, "AMX-BF16", None),  # Sapphire Rapids: AMX tiles, no goal
]


@pytest.mark.parametrize("flags, name, goal", CLASSES)
def test_a_cpu_falls_in_the_bf16_class_its_flags_say_with_that_class_goal(flags, name, goal):
    c = machine.bf16_class(frozenset(flags))
    assert (c.name, c.goal) == (name, goal)


def test_this_machines_flags_are_read_and_classed():
    flags = machine.cpu_flags()
    if not flags:
        pytest.skip("no /proc/cpuinfo or sysctl here: nothing to read")
    assert machine.bf16_class(flags) in machine.BF16_CLASSES
    assert f"bf16: {machine.bf16_class(flags).name}" in machine.describe()


def test_numpys_line_names_its_blas_its_kernel_and_its_simd():
    line = machine.numpy_kernels()
    assert line.startswith("NumPy ") and f", BLAS {machine.numpy_blas()}, SIMD " in line
    if "openblas" not in line:
        pytest.skip(f"NumPy here is not built on OpenBLAS ({line}): no kernel to force")
    forced = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "machine.py")], capture_output=True,
                            text=True, timeout=HANG_TIMEOUT, env={**os.environ, "OPENBLAS_CORETYPE": "Haswell"})
    assert "(Haswell kernels)" in forced.stdout, forced.stdout + forced.stderr  # the kernel run, not the one built


def test_each_ratio_says_what_it_depends_on():
    bf16 = machine.bf16_class(frozenset({"avx512_bf16"}))
    fp32 = peers.depends_on("fp32", bf16, "scipy-openblas (SkylakeX kernels)", "mkl, CPU capability AVX512")
    assert fp32 == "fp32 GEMMs: zerosim on scipy-openblas (SkylakeX kernels), torch on mkl, CPU capability AVX512"
    assert peers.depends_on("bf16-mixed", bf16, "", "").startswith("bf16: bf16 dot products; torch's bf16 GEMMs native")


def test_the_readme_table_states_the_bf16_goal_for_the_class_it_ran_on():
    med = {"pool": 0.3, "torch": 0.2, "one": 0.4, "pool cpu": 0.3, "one cpu": 0.4, "torch cpu": 0.4,
           "repeats": 5}
    rows = [(label, med, 919_296, 2, target) for label, _, _, _, target in peers.ROWS.values()]  # every ratio 1.50
    for flags, verdict in (({"avx2"}, "1.50 MISSED (≤ 0.5 for CPUs with no bf16 instructions)"),
                           ({"avx512_bf16"}, "1.50 met (≤ 2.0 for CPUs with bf16 dot products)"),
                           ({"amx_bf16"}, "1.50 no goal for CPUs with AMX-BF16 (AMX's tiles")):
        table = "\n".join(peers.readme_table([(("919k", 4), rows)], "header", machine.bf16_class(frozenset(flags))))
        assert f"ZeRO-3 bf16 params 919k, N = 4: {verdict}" in table, table
        assert "ZeRO-1 fp32 919k, N = 4: 1.50 MISSED (≤ 1.0)" in table  # the fp32 targets are the CPU's own
