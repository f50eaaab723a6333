"""The docs' GPU section (docs/how-to/run-on-gpus.md, "What ran on a GPU") and the README's summary quote the logs
of the run on an H100 (docs/gpu_run/), number for number: the test summary, the benchmark's timings and ratios, the
GPU-vs-CPU distances and the versions; likewise the second run's, on an H200 (docs/gpu_run/2026-11-29/). The logs
are the program's own output there; this test cannot rerun them without a GPU, so it checks the pages against them
(a later GPU run adds its logs and must update the pages)."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "docs" / "gpu_run"
SECOND = RUN / "2026-11-29"  # the second run: an H200, after the portable kernels


def readme_section(run: str = "### The first run") -> str:
    """The part of docs/how-to/run-on-gpus.md's "What ran on a GPU" that tells `run` (a heading's start), whitespace
    folded: the first run's, from its heading to the section's end; the second's, to the next heading."""
    text = (ROOT / "docs" / "how-to" / "run-on-gpus.md").read_text()
    start = text.index("## What ran on a GPU, and what never ran")
    start = text.index(run, start)
    end = text.find("\n## ", start + 1) if run == "### The first run" else text.find("\n### ", start + 1)
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
    assert "and on 2026-11-29 on one H200" in text and "H200" in (SECOND / "env.txt").read_text()
    second = re.search(r"\n(\d+) passed, (\d+) skipped", (SECOND / "floor-cupy-14.0.0.log").read_text())
    assert second.groups() == summary.groups() and "**165 passed, 39 skipped, 0 failed** both times" in text
    assert "**NCCL's multi-GPU collectives have never run**" in text


def test_the_second_run_is_quoted_number_for_number():
    text = readme_section("### The second run")
    tests = (SECOND / "gpu-tests.log").read_text()
    passed, skipped = re.search(r"=+ (\d+) passed, (\d+) skipped", tests).groups()
    assert "failed" not in tests.splitlines()[-1] and f"**{passed} passed, {skipped} skipped, 0 failed**" in text
    assert "all required comparisons agree" in (SECOND / "verify-nccl.log").read_text()
    assert "`zerosim verify-nccl`, N = 1: every collective agrees" in text
    floor = (SECOND / "floor-cupy-14.0.0.log").read_text()
    assert "floor cupy 14.0.0" in floor and "all required comparisons agree" in floor
    assert re.search(r"\n(\d+) passed, (\d+) skipped", floor).groups() == (passed, skipped)
    assert f"**CuPy 14.0.0**, the `gpu` extra's floor (`cupy-cuda13x>=14`): **{passed} passed, {skipped} skipped**" \
        in text
    engine = (SECOND / "engine-vs-cpu.log").read_text()
    for precision in ("fp32", "fp16-mixed"):
        found = {re.search(rf"stage {stage} {precision}: GPU vs CPU after 3 steps, ([\d.]+)% of masters differ, "
                           r"largest ([\d.e-]+)", engine).groups() for stage in range(4)}
        assert len(found) == 1  # every stage alike
        (share, largest), = found
        assert f"{share} % differ (largest {largest})" in text or f"**{share} % of the masters differ** (largest " \
            f"{largest})" in text
    grads = (SECOND / "gradients.log").read_text()
    fp32, fp16 = (re.search(rf"{p} 12 micro-batches: losses differ (\d+) \| gradient elements that differ: "
                            r"(\{.*\})", grads).groups() for p in ("fp32", "fp16-mixed"))
    assert f"the loss ({fp32[0]} of the 12 in fp32, {fp16[0]} in fp16-mixed)" in text
    differ32, differ16 = (ast.literal_eval(d) for d in (fp32[1], fp16[1]))  # the log's dicts: {"w0 (256, 64)": 0, ...}
    assert set(differ16.values()) == {0} and "In fp16-mixed no gradient element differs" in text
    assert all(n == 0 for name, n in differ32.items() if name.startswith("w"))  # every weight's: the CPU's bits
    sizes = [int(name.split("(")[1].rstrip(",)")) * 12 for name in differ32 if name.startswith("b")]
    counts = [n for name, n in differ32.items() if name.startswith("b")]
    assert f"({counts[0]} of the first layer's {sizes[0]:,} elements over the 12, {counts[1]} of {sizes[1]:,} and " \
        f"{counts[2]} of {sizes[2]:,} in the next two)" in text
    assert "sum axis 0 same: False" in grads and "sum 4096 same: True" in grads
    ring = re.search(r"N = 8: ([\d.]+) ms ÷ CuPy yardstick ([\d.]+) ms = ([\d.]+)",
                     (SECOND / "bench.log").read_text()).groups()
    assert f"takes {ring[2]}× a CuPy yardstick doing the same adds in the same order ({ring[0]} ms ÷ {ring[1]} ms)" \
        in text
    for log in ("bench.log", "bench-gpu-only.log"):  # the GPT's steps never printed
        assert "GPT" not in (SECOND / log).read_text()
    env = (SECOND / "env.txt").read_text()
    assert "cupy 14.2.0 | CUDA runtime 13020" in env and "NCCL 22809" in env and "Driver Version: 580.159.04" in env
    assert "NVIDIA H200" in env and "one NVIDIA H200 (driver 580.159.04, CUDA runtime 13.2, CuPy 14.2.0, NCCL 2.28.9" \
        in text
    for log in SECOND.iterdir():  # no path of the machine it ran on
        assert not re.search(r"/(work|opt|tmp|root|home)/", log.read_text()), log.name


def test_the_tool_that_wrote_the_gradients_log_runs_and_the_standin_agrees(capsys):
    # tools/gpu_gradients.py with NumPy standing in for CuPy: the device's code path on the host, so nothing may
    # differ (what differs on a GPU is CuPy's own reductions); the lines are the ones the log's test reads
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gpu_gradients
    finally:
        sys.path.remove(str(ROOT / "tools"))
    gpu_gradients.main(standin=True)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" 12 ")[0] for line in lines] == ["fp32", "fp16-mixed"]
    for line in lines:
        losses, differ = re.search(r"losses differ (\d+) \| gradient elements that differ: (\{.*\})", line).groups()
        assert losses == "0" and set(ast.literal_eval(differ).values()) == {0} and len(ast.literal_eval(differ)) == 6
