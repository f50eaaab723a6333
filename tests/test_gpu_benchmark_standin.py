"""benchmarks/gpu.py keeps working without a GPU: `--standin` runs its ring and ZeRO-3 step code at a toy size
with NumPy in CuPy's place (the cupy-sim backend's stand-in), including its own check that the ring's bits
equal the CuPy yardstick's adds. Only that it runs and checks is tested here; its timings mean nothing."""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import HANG_TIMEOUT

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_gpu_benchmark_runs_with_the_standin():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--standin", "--repeats", "1"],
                          capture_output=True, text=True, timeout=HANG_TIMEOUT, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ring reduce-scatter, 2**10 fp16 per rank, N = 8" in done.stdout
    # 8,768 = embeddings 64·16 + 8·16, two blocks of 3,280 (qkv 816, out 272, MLP 2,128, LayerNorms 64),
    # the final LayerNorm 32, the untied head 64·16
    assert "ZeRO-3 step, GPT of 8,768 params, N = 8" in done.stdout and "÷ the same step on the CPU" in done.stdout
