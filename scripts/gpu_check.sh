#!/usr/bin/env bash
# The real-GPU check of the CUDA backend, as ONE prepared command for a short device lease.
#
# Runs, from the repository root, with the machine's own Python (numpy, numba, numba-cuda,
# h5py, tqdm, pytest and torch come with the image; kiln is used from the checkout through
# PYTHONPATH, nothing is installed or downloaded):
#   1. versions and the GPU seen by numba-cuda;
#   2. the cuda tests on the device: NUMBA_ENABLE_CUDASIM=0 pytest tests/core/cuda (the registry
#      forward/gradient checks, training steps against the reference, random streams, and the
#      tests marked `cuda`, which skip without a GPU);
#   3. benchmarks/gpu.py: MLP and convnet training throughput next to PyTorch on CUDA.
# Logs and the benchmark's JSON lines go to $OUT (the device tool's folder; /tmp/kiln-gpu
# elsewhere). Each stage has its own time limit so that the whole run fits a 10-minute call.
#
# Usage (device machine):   bash scripts/gpu_check.sh
#        (here, no GPU):    bash scripts/gpu_check.sh --sim   # the same stages on the simulator
set -uo pipefail
SIM=0
[[ "${1:-}" == "--sim" ]] && SIM=1
OUT=${OUT:-/tmp/kiln-gpu}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-cache}
export NUMBA_ENABLE_CUDASIM=$SIM

echo "== versions"
"$PY" - <<'EOF' 2>&1 | tee "$OUT/versions.txt"
import platform, numpy, numba
print("python", platform.python_version(), "numpy", numpy.__version__, "numba", numba.__version__)
try:
    import numba_cuda
    print("numba-cuda", getattr(numba_cuda, "__version__", "?"))
    from numba import cuda
    print("cuda available:", cuda.is_available())
    if cuda.is_available():
        d = cuda.get_current_device()
        print("device:", getattr(d, "name", "?"), "cc", getattr(d, "compute_capability", "?"))
except Exception as e:  # noqa: BLE001
    print("numba-cuda:", type(e).__name__, e)
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.cuda.is_available())
except ImportError:
    print("torch: not installed")
EOF

echo "== cuda tests (NUMBA_ENABLE_CUDASIM=$SIM)"
timeout 300 "$PY" -m pytest -q -p no:cacheprovider -rs tests/core/cuda 2>&1 \
    | tee "$OUT/pytest_cuda.log" | tail -25
tests_rc=${PIPESTATUS[0]}

echo "== benchmarks/gpu.py"
if [[ $SIM == 1 ]]; then
    bench=(--sim --tiny --epochs 1)
else
    bench=(--epochs 3 --timeout 120)
fi
timeout 240 "$PY" benchmarks/gpu.py "${bench[@]}" 2>&1 | tee "$OUT/gpu_bench.log"
bench_rc=${PIPESTATUS[0]}

echo "== done: tests rc=$tests_rc, benchmark rc=$bench_rc (logs in $OUT)"
exit $(( tests_rc != 0 || bench_rc != 0 ))
