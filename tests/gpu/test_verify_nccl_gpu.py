"""`zerosim verify-nccl` on real GPUs: NCCL's one ring in rank order gives zerosim's bytes. Needs >= 2 GPUs for
anything but the plumbing (with one GPU every collective is a copy). NEVER RUN YET (no GPU while writing it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from zerosim.backends.cupy import BackendUnavailable, import_cupy

try:
    cp, _nccl, DEVICES = import_cupy()
except BackendUnavailable as e:
    pytest.skip(f"GPU tests need CuPy, a CUDA device and NCCL: {e}", allow_module_level=True)


@pytest.mark.parametrize("n", sorted({1, min(2, DEVICES), DEVICES}))
def test_verify_nccl_agrees_on_every_required_comparison(n):
    # a fresh process: NCCL reads the ring's environment when its first communicator is made
    done = subprocess.run([sys.executable, "-m", "zerosim.cli.main", "verify-nccl", "--ranks", str(n),
                           "--elements", "300001"], capture_output=True, text=True)
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all required comparisons agree" in done.stdout
