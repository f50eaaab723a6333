"""The docs' GPU section (docs/how-to/run-on-gpus.md, "What ran on a GPU") and the README's summary quote the logs
of the run on an H100 (docs/gpu_run/), number for number: the test summary, the benchmark's timings and ratios, the
GPU-vs-CPU distances and the versions. The logs are the program's own output there; this test cannot rerun them
without a GPU, so it checks the pages against them (a later GPU run replaces the logs and must update the pages)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "docs" / "gpu_run"


def readme_section() -> str:
    """The section of docs/how-to/run-on-gpus.md that tells the run, whitespace folded."""
    text = (ROOT / "docs" / "how-to" / "run-on-gpus.md").read_text()
    start = text.index("## What ran on a GPU, and what never ran")
    end = text.find("\n## ", start + 1)
    return " ".join(text[start: end if end > 0 else None].split())


def test_the_readme_quotes_the_test_summary():
    summary = re.search(r"=+ (\d+) passed, (\d+) skipped", (RUN / "gpu-tests.log").read_text())
    passed, skipped = summary.groups()
    assert "failed" not in summary.group(0)
    assert f"**{passed} passed, {skipped} skipped, 0 failed**" in readme_section()
    skips = [int(n) for n in re.findall(r"SKIPPED \[(\d+)\]", (RUN / "gpu-tests.log").read_text())]
    mesh = sum(
        int(n) for n in re.findall(r"SKIPPED \[(\d+)\] .*2 × 2 mesh needs 4 GPUs", (RUN / "gpu-tests.log").read_text())
    )
    two = sum(int(n) for n in re.findall(r"SKIPPED \[(\d+)\] .*needs 2 GPUs", (RUN / "gpu-tests.log").read_text()))
    assert sum(skips) == int(skipped) and f"{mesh} tests need a 2 × 2 mesh of 4 GPUs, {two} need 2 GPUs, " \
        f"{int(skipped) - mesh - two} run only under `mpiexec`" in readme_section()


def test_the_readme_quotes_the_benchmark():
    bench, text = (RUN / "bench.log").read_text(), readme_section()
    ring = re.search(r"N = 8: ([\d.]+) ms ÷ CuPy yardstick ([\d.]+) ms = ([\d.]+)", bench).groups()
    assert (
        f"takes {ring[2]}× a CuPy yardstick doing the same adds in the same order ({ring[0]} ms ÷ {ring[1]} ms)" in text
    )
    params, ms, oracle_ms, ratio = re.search(
        r"GPT of ([\d,]+) params, N = 8, fp16-mixed: (\d+) ms on the GPU; ÷ the oracle on the GPU (\d+) ms = ([\d.]+)",
        bench).groups()
    cpu_ms, cpu_ratio = re.search(r"÷ the same step on the CPU (\d+) ms = ([\d.]+)", bench).groups()
    assert f"a ZeRO-3 step of a {params}-parameter GPT on 8 simulated ranks in fp16-mixed takes {ms} ms, " \
           f"{ratio}× the same arithmetic with no ranks on that GPU ({oracle_ms} ms;" in text
    assert f"{cpu_ratio}× the same step on the machine's 16 CPU cores ({int(cpu_ms):,} ms)" in text
    assert "H100" in bench.splitlines()[0] and "CuPy 14.2.0" in bench.splitlines()[0]


def test_the_readme_quotes_the_gpu_cpu_distances_and_versions():
    log, text = (RUN / "engine-vs-cpu.log").read_text(), readme_section()
    for precision in ("fp32", "fp16-mixed"):
        share, largest = re.search(rf"stage 0 {precision}: GPU vs CPU after 3 steps, ([\d.]+%) of masters differ, "
                                   r"largest ([\d.e-]+)", log).groups()
        assert f"{share.replace('%', ' %')}" in text and f"largest {largest})" in text
    env = (RUN / "env.txt").read_text()
    assert "cupy 14.2.0 | CUDA runtime 13020" in env and "NCCL 22809" in env and "Driver Version: 580.159.04" in env
    assert "CUDA runtime 13.2, CuPy 14.2.0, NCCL 2.28.9" in text and "driver 580.159.04" in text
    assert "10 passed" in log and "all required comparisons agree" in (RUN / "verify-nccl.log").read_text()


def test_the_readme_summary_is_the_run():
    """The README's paragraph on hardware: the same summary, the date, and what never ran."""
    text = " ".join((ROOT / "README.md").read_text().split())
    summary = re.search(r"=+ (\d+) passed, (\d+) skipped", (RUN / "gpu-tests.log").read_text())
    assert f"**{summary.group(1)} passed, {summary.group(2)} skipped, 0 failed**" in text
    assert "on 2026-11-23, on **one** NVIDIA H100" in text and "H100" in (RUN / "env.txt").read_text()
    assert "**NCCL's multi-GPU collectives have never run**" in text
