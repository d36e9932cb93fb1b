"""Clear errors when the cuda backend cannot run: numba-cuda, the driver, the GPU or the CUDA
toolkit missing; lazy import of numba.cuda."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln
from kiln.core.backends.cuda import _device
from kiln.core.backends.cuda._device import CudaUnavailableError, DriverState

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


@pytest.fixture
def fresh_check(monkeypatch):
    monkeypatch.setattr(_device, "_checked", {})


def test_missing_numba_cuda_says_how_to_install(monkeypatch, fresh_check):
    monkeypatch.setitem(sys.modules, "numba_cuda", None)
    with pytest.raises(CudaUnavailableError) as info:
        _device.check_available()
    assert info.value.reason == "numba-cuda"
    msg = str(info.value)
    assert "needs the numba-cuda package, which is not installed" in msg
    assert 'pip install "kiln-nn[cuda]"' in msg
    assert 'backend="cpu"' in msg
    x = kiln.placeholder((2,))
    with pytest.raises(CudaUnavailableError, match=r'pip install "kiln-nn\[cuda\]"'):
        kiln.function([x], x * 2.0, backend="cuda")
    assert not _device.is_available()


def _real_mode(monkeypatch, state: DriverState) -> None:
    pytest.importorskip("numba_cuda")
    monkeypatch.setattr(_device, "simulator_enabled", lambda: False)
    monkeypatch.setattr(_device, "driver_state", lambda cuda: state)


def test_missing_driver(monkeypatch, fresh_check):
    _real_mode(monkeypatch, DriverState(
        "\nCUDA driver library cannot be found.\nEnsure that a compatible NVIDIA driver is "
        "installed and available on your system path.\n", 0, False))
    with pytest.raises(CudaUnavailableError) as info:
        _device.check_available()
    assert info.value.reason == "driver"
    msg = str(info.value)
    assert "found numba-cuda but no usable NVIDIA driver" in msg
    assert "CUDA driver library cannot be found" in msg
    assert "Install the NVIDIA driver for your GPU (check with `nvidia-smi`)" in msg
    assert "NUMBA_ENABLE_CUDASIM=1" in msg


@pytest.mark.parametrize("state", [DriverState("CUDA_ERROR_NO_DEVICE (100)", 0, False),
                                   DriverState(None, 0, True)])
def test_missing_gpu(monkeypatch, fresh_check, state):
    _real_mode(monkeypatch, state)
    with pytest.raises(CudaUnavailableError) as info:
        _device.check_available()
    assert info.value.reason == "gpu"
    assert "found numba-cuda and the NVIDIA driver, but no CUDA GPU" in str(info.value)
    assert "CUDA_VISIBLE_DEVICES" in str(info.value)


def test_missing_toolkit(monkeypatch, fresh_check):
    _real_mode(monkeypatch, DriverState(None, 1, False, "libnvvm not found"))
    with pytest.raises(CudaUnavailableError) as info:
        _device.check_available()
    assert info.value.reason == "toolkit"
    assert "NVVM and libdevice" in str(info.value)
    assert '"numba-cuda[cu12]"' in str(info.value)


def test_simulator_counts_as_a_device():
    pytest.importorskip("numba_cuda")
    if not _device.simulator_enabled():
        pytest.skip("runs under NUMBA_ENABLE_CUDASIM=1")
    assert _device.is_available()
    assert not _device.real_gpu_available()
    from kiln.core.backends.cuda import device_info

    assert device_info() == {"name": "CUDA simulator", "simulator": True}


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, **env}, timeout=120)


def test_backend_module_imports_numba_cuda_lazily():
    proc = _run("""
        import sys
        from kiln.core.backends import get_backend
        mod = get_backend("cuda")
        assert hasattr(mod, "compile_graph")
        assert "numba.cuda" not in sys.modules, "numba.cuda imported too early"
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_without_the_simulator_the_real_probe_answers():
    pytest.importorskip("numba_cuda")
    proc = _run("""
        from kiln.core.backends.cuda import CudaUnavailableError, check_available
        try:
            check_available()
            print("usable")
        except CudaUnavailableError as exc:
            print("reason=" + exc.reason)
            print(exc)
    """, NUMBA_ENABLE_CUDASIM="0")
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first == "usable" or first in ("reason=driver", "reason=gpu", "reason=toolkit")
    if first != "usable":
        assert "kiln's cuda backend found numba-cuda" in proc.stdout


def test_function_error_names_the_backend(monkeypatch, fresh_check):
    monkeypatch.setitem(sys.modules, "numba_cuda", None)
    x = kiln.placeholder((None, 2))
    with pytest.raises(CudaUnavailableError, match="cuda backend"):
        kiln.function([x], x + np.float32(1), backend="cuda")
