"""docs/configuration.md lists exactly the KILN_* variables kiln reads, and each reader refuses a
bad value with an error naming the variable and the value."""

from __future__ import annotations

import os
import re

import pytest

import kiln
from kiln import config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = re.compile(r"\bKILN_[A-Z][A-Z0-9_]*[A-Z0-9]\b")


def _read_in_code() -> set[str]:
    found = set()
    for folder, _, files in os.walk(os.path.join(ROOT, "kiln")):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    found |= set(NAME.findall(f.read()))
    return found


def _documented() -> set[str]:
    with open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8") as f:
        rows = [line for line in f if line.startswith("| `KILN_")]
    return {NAME.search(row).group(0) for row in rows}


def test_every_variable_kiln_reads_is_documented_and_every_documented_one_is_read():
    code, docs = _read_in_code(), _documented()
    assert len(code) >= 19  # the table's size when this test was written
    assert not code - docs, f"read in kiln/ but not in docs/configuration.md: {code - docs}"
    assert not docs - code, f"in docs/configuration.md but read nowhere in kiln/: {docs - code}"


def test_the_readme_links_the_configuration_page():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        assert "docs/configuration.md" in f.read()


def _threads():
    from kiln.core.backends.cpu.runtime import threads

    return threads.kernel_threads()


def _workers():
    from kiln.core.backends.cpu.codegen import compile_batch

    return compile_batch.workers()


def _winograd():
    from kiln.core.backends.cpu.kernels.conv import winograd

    return winograd.tile_size()


def _blas():
    from kiln.core.backends.cpu.gemm import blas

    return blas.mode()


def _native():
    from kiln.core.backends.cpu.codegen import native

    return native.enabled()


def _target():
    from kiln.core.backends.cpu import target

    return target.build()


def _mirror():
    from types import SimpleNamespace

    from kiln.datasets import _source

    return _source.mirror_url(SimpleNamespace(name="mnist", base_url="https://example.invalid"))


BAD = [
    ("KILN_NUM_THREADS", "0", "KILN_NUM_THREADS must be a positive integer, got '0'", _threads),
    ("KILN_NUM_THREADS", "-1", "KILN_NUM_THREADS must be a positive integer, got '-1'",
     _threads),
    ("KILN_COMPILE_WORKERS", "1.5", "KILN_COMPILE_WORKERS must be a positive integer, got '1.5'",
     _workers),
    ("KILN_WINOGRAD", "3", "KILN_WINOGRAD must be 0, 2 or 4, got '3'", _winograd),
    ("KILN_BLAS", "mkl", "KILN_BLAS must be 'auto', 'numpy' or an OpenBLAS core name", _blas),
    ("KILN_BACKEND", "gpu", "KILN_BACKEND must be one of 'cpu', 'reference', 'cuda', got 'gpu'",
     config.default_backend),
    ("KILN_DEVICE", "tpu", "KILN_DEVICE must be one of 'cpu', 'cuda', 'auto', got 'tpu'",
     config.device),
    ("KILN_JIT", "maybe", "KILN_JIT must be 0 or 1", config.jit_enabled),
    ("KILN_DEBUG", "2", "KILN_DEBUG must be 0 or 1", config.debug_enabled),
    ("KILN_PROFILE", "yes please", "KILN_PROFILE must be 0 or 1", config.profile_enabled),
    ("KILN_NATIVE", "llvm", "KILN_NATIVE must be 0 or 1", _native),
    ("KILN_SPIN_POOL", "2", "KILN_SPIN_POOL must be 0 or 1", _target),
    ("KILN_CPU", "pentium9000", "KILN_CPU='pentium9000' is not a CPU LLVM knows", _target),
    ("KILN_DIST_TIMEOUT", "0", "KILN_DIST_TIMEOUT must be a positive number, got '0'",
     lambda: kiln.distribution.DataParallel()),
    ("KILN_DIST_TIMEOUT", "soon", "KILN_DIST_TIMEOUT must be a positive number, got 'soon'",
     lambda: kiln.distribution.DataParallel()),
    ("KILN_DATASETS_MIRROR", "mirror.local/data",
     "KILN_DATASETS_MIRROR must be an http://, https:// or file:// URL, got 'mirror.local/data'",
     _mirror),
]


@pytest.mark.parametrize("name, value, message, read", BAD,
                         ids=[f"{name}={value}" for name, value, _, _ in BAD])
def test_a_bad_value_is_refused_naming_the_variable(name, value, message, read, monkeypatch):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        read()


@pytest.mark.parametrize("name", ["KILN_DATASETS_OFFLINE", "KILN_CUDA_FAST_LAUNCH"])
def test_switches_read_through_env_flag_refuse_other_words(name, monkeypatch):
    for value, want in (("1", True), ("on", True), ("0", False), ("", False), ("off", False)):
        monkeypatch.setenv(name, value)
        assert config.env_flag(name) is want
    monkeypatch.setenv(name, "sometimes")
    with pytest.raises(ValueError, match=f"{name} must be 0 or 1.*got 'sometimes'"):
        config.env_flag(name)


def test_kiln_cuda_blas_choices(monkeypatch):
    monkeypatch.setenv("KILN_CUDA_BLAS", "CuPy")
    assert config.env_choice("KILN_CUDA_BLAS", ("auto", "cupy", "kiln"), "auto") == "cupy"
    monkeypatch.setenv("KILN_CUDA_BLAS", "cublas")
    with pytest.raises(ValueError, match="KILN_CUDA_BLAS must be one of 'auto', 'cupy', "
                                         "'kiln', got 'cublas'"):
        config.env_choice("KILN_CUDA_BLAS", ("auto", "cupy", "kiln"), "auto")


def test_good_values_are_read(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", " 3 ")
    assert _threads() == 3
    monkeypatch.setenv("KILN_DIST_TIMEOUT", "2.5")
    assert config.env_positive_float("KILN_DIST_TIMEOUT", 600.0) == 2.5
    monkeypatch.setenv("KILN_DATASETS_MIRROR", "file:///srv/mirror")
    assert config.env_url("KILN_DATASETS_MIRROR") == "file:///srv/mirror"
    monkeypatch.setenv("KILN_DEVICE", "AUTO")
    assert config.device() == "auto"
