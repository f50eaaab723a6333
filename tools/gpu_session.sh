#!/usr/bin/env bash
# What a session on a GPU machine runs for the CuPy backends (docs/how-to/run-on-gpus.md), logs into DIR:
#   bash tools/gpu_session.sh DIR
# env.txt (GPU, driver, CUDA, CuPy, NCCL, NumPy, ml_dtypes), gpu-tests.log (pytest tests/gpu -v -rs),
# verify-nccl.log (zerosim verify-nccl on every GPU there is), engine-vs-cpu.log (the engine on the GPU against the
# oracle there and the CPU), gradients.log (tools/gpu_gradients.py: where the GPU's and the CPU's gradients part),
# bench.log (benchmarks/gpu.py, last: the longest).
set -u -o pipefail
out=${1:?usage: bash tools/gpu_session.sh DIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
{
  nvidia-smi
  "$py" - <<'PY'
import sys, numpy, ml_dtypes, cupy
from cupy.cuda import nccl, runtime
p = runtime.getDeviceProperties(0)
print("python", sys.version.split()[0], "| numpy", numpy.__version__, "| ml_dtypes", ml_dtypes.__version__)
print("cupy", cupy.__version__, "| CUDA runtime", runtime.runtimeGetVersion(), "| driver", runtime.driverGetVersion(),
      "| NCCL", nccl.get_version(), "| GPUs", runtime.getDeviceCount(), "|", p["name"].decode())
PY
} >"$out/env.txt" 2>&1
cat "$out/env.txt"
gpus=$("$py" -c "import cupy; print(cupy.cuda.runtime.getDeviceCount())")
timeout "${TESTS_S:-360}" "$py" -m pytest tests/gpu -v -rs -p no:cacheprovider --durations=10 2>&1 | tee "$out/gpu-tests.log"
timeout 120 "$py" -m zerosim.cli.main verify-nccl --ranks "$gpus" 2>&1 | tee "$out/verify-nccl.log"
engine=(-m pytest tests/gpu/test_device_ranks.py -k "engine or subnormal or ftz or flush" -s -q -p no:cacheprovider)
{ echo "\$ python3 ${engine[*]}"; timeout 120 "$py" "${engine[@]}"; } 2>&1 | tee "$out/engine-vs-cpu.log"
timeout 120 "$py" tools/gpu_gradients.py 2>&1 | tee "$out/gradients.log"
timeout "${BENCH_S:-240}" "$py" benchmarks/gpu.py ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.log"
