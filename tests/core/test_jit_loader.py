"""The one JIT loader (kiln/core/backends/jit.py): one key scheme for every target, files
written atomically and never rewritten when identical, and a damaged cache that never gives
wrong results."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from kiln.core.backends import jit as loader
from kiln.core.backends.cpu.codegen import jit as cpu_jit

SRC = "def add_one(o, a):\n    for i in range(a.shape[0]):\n        o[i] = a[i] + 1\n"


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty KILN_CACHE_DIR and a loader that has loaded nothing in this process."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(loader, "_loaded", {})
    return tmp_path


def _forget(path: str) -> None:
    """Makes the loader forget a file, as a new process would (memo and module)."""
    loader._loaded.pop(path, None)
    for name in [n for n, m in sys.modules.items()
                 if n.startswith("kiln_jit_") and getattr(m, "__file__", None) == path]:
        del sys.modules[name]


def test_keys_are_deterministic_and_depend_on_everything():
    text = "def f(o, a):\n    o[0] = a[0]\n"
    k = loader.kernel_key("cpu", "f", text, options="fastmath=False", signature="float32")
    assert k == loader.kernel_key("cpu", "f", text, options="fastmath=False",
                                  signature="float32")
    others = {
        loader.kernel_key("cpu", "f", text + "\n", options="fastmath=False", signature="float32"),
        loader.kernel_key("cpu", "f", text, options="fastmath=True", signature="float32"),
        loader.kernel_key("cpu", "f", text, options="fastmath=False", signature="float64"),
        loader.kernel_key("cpu", "g", text, options="fastmath=False", signature="float32"),
        loader.kernel_key("cuda", "f", text, options="fastmath=False", signature="float32"),
        loader.kernel_key("cudasim", "f", text, options="fastmath=False", signature="float32"),
    }
    assert len(others | {k}) == 7
    with pytest.raises(ValueError, match="unknown JIT target"):
        loader.kernel_key("tpu", "f", text)


def test_toolchain_names_numba_cuda_only_for_cuda_targets():
    assert "numba=" in loader.toolchain("cpu") and "numba-cuda" not in loader.toolchain("cpu")
    assert "numba-cuda=" in loader.toolchain("cuda")
    assert loader.toolchain("cuda") == loader.toolchain("cudasim")


def test_targets_write_to_their_own_folders(fresh):
    a = loader.load_source("cpu", SRC, "add_one", header="")
    b = loader.load_source("cudasim", SRC, "add_one", header="")
    assert a.key != b.key
    assert os.path.dirname(a.path) == os.path.join(str(fresh), "cpu")
    assert os.path.dirname(b.path) == os.path.join(str(fresh), "cudasim")
    assert os.path.basename(a.path) == f"k_{a.key}.py"
    assert loader.load_source("cpu", SRC, "add_one", header="") is a


def test_identical_source_is_never_rewritten(fresh):
    counts = {"sources_written": 0, "modules_loaded": 0}
    src = loader.load_source("cpu", SRC, "add_one", header="", counts=counts)
    assert counts == {"sources_written": 1, "modules_loaded": 1}
    before = os.stat(src.path).st_mtime_ns
    _forget(src.path)
    again = loader.load_source("cpu", SRC, "add_one", header="", counts=counts)
    assert again.path == src.path and again is not src
    assert os.stat(src.path).st_mtime_ns == before  # numba's cache index checks this
    assert counts == {"sources_written": 1, "modules_loaded": 2}
    assert not glob.glob(os.path.join(str(fresh), "cpu", "*.tmp"))


def test_a_damaged_file_is_rewritten(fresh):
    src = loader.load_source("cpu", SRC, "add_one", header="import math\n\n\n")
    with open(src.path) as f:
        text = f.read()
    _forget(src.path)
    with open(src.path, "w") as f:  # truncated in the middle of the function
        f.write(text[: len(text) - 20])
    again = loader.load_source("cpu", SRC, "add_one", header="import math\n\n\n")
    with open(src.path) as f:
        assert f.read() == text
    a = np.arange(3.0)
    o = np.empty_like(a)
    again.function(o, a)
    np.testing.assert_array_equal(o, a + 1)


def test_no_bytecode_is_written_or_read(fresh, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    src = loader.load_source("cpu", SRC, "add_one", header="")
    pycache = os.path.join(os.path.dirname(src.path), "__pycache__")
    assert not glob.glob(os.path.join(pycache, "*.pyc"))
    os.makedirs(pycache, exist_ok=True)
    tag = sys.implementation.cache_tag
    with open(os.path.join(pycache, f"k_{src.key}.{tag}.pyc"), "wb") as f:
        f.write(b"\xff" * 64)  # garbage where Python would look for bytecode
    _forget(src.path)
    again = loader.load_source("cpu", SRC, "add_one", header="")
    a = np.arange(3.0)
    o = np.empty_like(a)
    again.function(o, a)
    np.testing.assert_array_equal(o, a + 1)


def test_the_module_is_built_from_the_text_not_from_the_file(fresh, monkeypatch):
    # a file changed after it was checked (a race with another process) is never executed
    monkeypatch.setattr(loader, "write_source", lambda path, text, force=False: False)
    os.makedirs(os.path.join(str(fresh), "cpu"))
    text = f"# kiln cpu kernel add_one [] \n{SRC}"
    key = loader.kernel_key("cpu", "add_one", text)
    with open(os.path.join(str(fresh), "cpu", f"k_{key}.py"), "w") as f:
        f.write(SRC.replace("+ 1", "+ 2"))
    src = loader.load_source("cpu", SRC, "add_one", header="")
    a = np.arange(3.0)
    o = np.empty_like(a)
    src.function(o, a)
    np.testing.assert_array_equal(o, a + 1)


def test_a_file_that_cannot_be_imported_raises_a_clear_error(fresh):
    bad = "def f():\n    return 1\n\n\nraise RuntimeError('broken generator')\n"
    with pytest.raises(loader.KernelLoadError) as info:
        loader.load_source("cpu", bad, "f", header="")
    msg = str(info.value)
    assert os.path.join(str(fresh), "cpu") in msg and "broken generator" in msg


def test_cpu_kernels_load_through_the_loader(fresh, monkeypatch):
    kernel = cpu_jit.load(SRC, "add_one", signature="loader-test")
    assert kernel.jitted and kernel.path.startswith(str(fresh))
    a = np.arange(4.0)
    o = np.empty_like(a)
    kernel(o, a)
    np.testing.assert_array_equal(o, a + 1)
    monkeypatch.setenv("KILN_JIT", "0")
    plain = cpu_jit.load(SRC, "add_one", signature="loader-test")
    assert not plain.jitted and plain.path == kernel.path  # same file, run as Python
    assert plain.specialize((o, a)) is plain.py
    o[:] = 0
    plain(o, a)
    np.testing.assert_array_equal(o, a + 1)


def test_the_cuda_layer_imports_nothing_private_from_the_cpu_backend():
    import kiln.core.backends.cuda._jit as cuda_jit

    with open(cuda_jit.__file__) as f:
        text = f.read()
    assert "backends.cpu" not in text
    assert "hashlib" not in text and "os.replace" not in text  # keys and files: the loader's


SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    from kiln.core.backends.cpu.codegen import jit
    src = "def add_one(o, a):\\n    for i in range(a.shape[0]):\\n        o[i] = a[i] + 1\\n"
    k = jit.load(src, "add_one", signature="damaged-cache-test")
    a = np.arange(5.0)
    o = np.zeros_like(a)
    k(o, a)
    print(json.dumps({"out": o.tolist(), "path": k.path, "stats": jit.stats}))
""")


def _run(cache: str) -> dict:
    env = dict(os.environ, KILN_CACHE_DIR=cache)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_truncated_kernel_file_gives_correct_results_in_a_new_process(tmp_path):
    cache = str(tmp_path / "cache")
    first = _run(cache)
    assert first["out"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    with open(first["path"]) as f:
        text = f.read()
    with open(first["path"], "w") as f:
        f.write(text[: text.index("o[i] = a[i]")])  # a SyntaxError, and numba's index is stale
    second = _run(cache)
    assert second["out"] == first["out"]
    assert second["stats"]["sources_written"] == 1
    with open(first["path"]) as f:
        assert f.read() == text
    third = _run(cache)  # and the repaired file serves from numba's cache again
    assert third["out"] == first["out"]
    assert third["stats"]["sources_written"] == 0 and third["stats"]["compiled"] == 0
