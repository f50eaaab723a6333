"""The cupy backend on a machine without CuPy or without a GPU: lazy imports and clear errors.

CuPy's absence is simulated with `sys.modules["cupy"] = None` (an import of it then fails), and
"CuPy installed but no GPU" with a stand-in module whose device count raises or returns 0, so these
tests say the same thing on a GPU machine as on a laptop.
"""

import re
import subprocess
import sys
import types

import pytest

from zerosim import Cluster
from zerosim.backends import make_backend
from zerosim.backends.cupy import BackendUnavailable
from zerosim.backends.mpi import launched_by_mpiexec

NEEDS = "the cupy backend needs CuPy (pip install -e '.[gpu]') and an NVIDIA GPU with CUDA"


class CUDARuntimeError(RuntimeError):
    """Stands in for cupy_backends.cuda.api.runtime.CUDARuntimeError."""


def fake_cupy(monkeypatch, device_count, nccl_available=True):
    """Install a stand-in `cupy` whose `cuda.runtime.getDeviceCount()` returns (or raises) `device_count`."""

    def get_device_count():
        if isinstance(device_count, Exception):
            raise device_count
        return device_count

    nccl = types.ModuleType("cupy.cuda.nccl")
    nccl.available = nccl_available
    nccl.get_version = lambda: 21805
    cuda = types.ModuleType("cupy.cuda")
    cuda.runtime = types.SimpleNamespace(getDeviceCount=get_device_count)
    cuda.nccl = nccl
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    for name, module in (("cupy", cupy), ("cupy.cuda", cuda), ("cupy.cuda.nccl", nccl)):
        monkeypatch.setitem(sys.modules, name, module)


@pytest.fixture(autouse=True)
def not_under_mpiexec(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):  # launch="auto" must mean one process here
        monkeypatch.delenv(var, raising=False)


def test_importing_zerosim_never_imports_cupy():
    code = (
        "import sys, zerosim, zerosim.backends, zerosim.backends.cupy._backend\n"
        "from zerosim.backends import make_backend\n"
        "print(sorted(m for m in ('cupy', 'cupy_backends', 'mpi4py') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.bad_input("cluster and backends")
@pytest.mark.parametrize("make", [lambda: Cluster(4, backend="cupy"), lambda: make_backend("cupy", 2)])
def test_without_cupy_the_error_says_cupy_is_not_installed(monkeypatch, make):
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` now raises ModuleNotFoundError
    with pytest.raises(BackendUnavailable, match=re.escape(f"{NEEDS}; CuPy is not installed")):
        make()


@pytest.mark.bad_input("cluster and backends")
def test_without_a_device_the_error_gives_cudas_reason(monkeypatch):
    fake_cupy(monkeypatch, CUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected"))
    with pytest.raises(BackendUnavailable) as info:
        Cluster(2, backend="cupy")
    assert str(info.value) == (
        f"{NEEDS}; no CUDA device was found: CUDARuntimeError: cudaErrorNoDevice: no CUDA-capable device is detected"
    )


@pytest.mark.bad_input("cluster and backends")
def test_with_zero_devices_the_error_says_so(monkeypatch):
    fake_cupy(monkeypatch, 0)
    with pytest.raises(BackendUnavailable) as info:
        Cluster(2, backend="cupy")
    assert str(info.value) == f"{NEEDS}; no CUDA device was found: cupy.cuda.runtime.getDeviceCount() returned 0"


@pytest.mark.bad_input("cluster and backends")
def test_without_nccl_the_error_says_how_to_install_it(monkeypatch):
    fake_cupy(monkeypatch, 2, nccl_available=False)
    with pytest.raises(BackendUnavailable, match=r"NCCL.*cupyx\.tools\.install_library --cuda 13\.x --library nccl"):
        Cluster(2, backend="cupy")


@pytest.mark.bad_input("cluster and backends")
def test_more_ranks_than_gpus_in_one_process_is_a_clear_error(monkeypatch):
    fake_cupy(monkeypatch, 2)
    with pytest.raises(
        ValueError, match=r"Cluster\(4, backend='cupy'\) drives one GPU per rank .* CuPy sees 2 GPU\(s\)"
    ):
        Cluster(4, backend="cupy")


@pytest.mark.bad_input("cluster and backends")
def test_bad_options_fail_before_cupy_is_touched(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(ValueError, match="launch must be"):
        Cluster(2, backend="cupy", launch="threads")
    with pytest.raises(ValueError, match="arrays must be"):
        Cluster(2, backend="cupy", arrays="unified")


def test_the_error_is_a_runtime_error():
    assert issubclass(BackendUnavailable, RuntimeError)  # callers may catch RuntimeError to fall back to numpy


@pytest.mark.parametrize(
    "env, expected",
    [({}, False), ({"PMI_SIZE": "1"}, False), ({"PMI_SIZE": "4"}, True), ({"OMPI_COMM_WORLD_SIZE": "2"}, True)],
)
def test_launch_auto_reads_mpiexecs_environment(monkeypatch, env, expected):
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert launched_by_mpiexec() is expected
