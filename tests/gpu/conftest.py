"""tests/gpu: the CuPy + NCCL backend on real GPUs. Everything here is skipped, with the reason, unless
CuPy, a CUDA device and NCCL are all present. How to run them: the first lines of docs/nccl_mapping.md.
"""

from pathlib import Path

import pytest

from zerosim.backends.cupy import BackendUnavailable, import_cupy

HERE = Path(__file__).parent

try:
    import_cupy()  # imports cupy only here, and only when pytest collects this directory
    SKIP_REASON = None
except BackendUnavailable as e:
    SKIP_REASON = f"GPU tests need CuPy, a CUDA device and NCCL: {e}"


def pytest_collection_modifyitems(config, items):
    """Mark every test under tests/gpu as `gpu`, and skip it with the reason when the GPU stack is missing."""
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.gpu)
            if SKIP_REASON is not None:
                item.add_marker(pytest.mark.skip(reason=SKIP_REASON))
