"""Is the CuPy + NCCL backend usable here? `import_cupy` answers, or says what is missing and how to get it.

Nothing imports cupy until this is called: `import zerosim` never loads it.
"""

from __future__ import annotations

INSTALL_HINT = "the cupy backend needs CuPy (pip install -e '.[gpu]') and an NVIDIA GPU with CUDA"
NCCL_HINT = (
    "CuPy could not load NCCL (cupy.cuda.nccl.available is False); install it with "
    "`python -m cupyx.tools.install_library --cuda 13.x --library nccl` (12.x with cupy-cuda12x), or put "
    "libnccl.so.2 on LD_LIBRARY_PATH"
)


class BackendUnavailable(RuntimeError):
    """The cupy backend cannot start here; the message says what is missing and how to get it."""


def import_cupy():
    """Return (cupy, cupy.cuda.nccl, device_count), or raise `BackendUnavailable` naming what is missing."""
    try:
        import cupy
    except ModuleNotFoundError as e:
        if e.name != "cupy":
            raise BackendUnavailable(f"{INSTALL_HINT}; CuPy is installed but failed to import: {e}") from e
        raise BackendUnavailable(f"{INSTALL_HINT}; CuPy is not installed") from e
    except Exception as e:  # e.g. a CuPy wheel whose CUDA libraries cannot be loaded
        raise BackendUnavailable(
            f"{INSTALL_HINT}; CuPy is installed but failed to import: {type(e).__name__}: {e}"
        ) from e
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # CUDARuntimeError: cudaErrorNoDevice, cudaErrorInsufficientDriver, no libcuda, ...
        raise BackendUnavailable(f"{INSTALL_HINT}; no CUDA device was found: {type(e).__name__}: {e}") from e
    if count < 1:
        raise BackendUnavailable(f"{INSTALL_HINT}; no CUDA device was found: cupy.cuda.runtime.getDeviceCount() "
                                 f"returned {count}")
    try:
        from cupy.cuda import nccl
    except Exception as e:
        raise BackendUnavailable(f"{INSTALL_HINT}, and NCCL: {NCCL_HINT} ({type(e).__name__}: {e})") from e
    if not getattr(nccl, "available", False):
        raise BackendUnavailable(f"{INSTALL_HINT}, and NCCL: {NCCL_HINT}")
    return cupy, nccl, count
