"""A damaged kernel cache, or one that cannot be used, never stops a run and never gives
wrong numbers (docs/architecture.md, "The kernel cache").

Each class of damage is checked in this process (a "new process" is simulated by making the
loader and the CPU JIT layer forget every kernel, so numba reads its disk cache again):
an empty, truncated, random or bit-flipped index or data file, files swapped between kernels,
a kernel file that is not what kiln wrote, and a cache folder that is a file, read-only or on
a full disk. The fuzz test runs fresh processes on a cache damaged at random between runs.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import random
import stat
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from kiln.core.backends import jit as loader
from kiln.core.backends import numba_cache
from kiln.core.backends.cpu.codegen import jit as cpu_jit

AFFINE = "def affine(o, a):\n    for i in range(a.shape[0]):\n        o[i] = a[i] * {m} + {c}\n"
KERNELS = {"A": (3.0, 1.0), "B": (5.0, -2.0), "C": (-1.0, 0.5)}
X = np.linspace(-2.0, 2.0, 7)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty KILN_CACHE_DIR, and the loader's per-process state reset."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(loader, "_unusable", {})
    monkeypatch.setattr(loader, "_warned", set())
    new_process(monkeypatch)
    return tmp_path / "cache"


def new_process(monkeypatch) -> None:
    """Forgets every loaded kernel, as a new process would: the next load builds a new numba
    dispatcher, which reads numba's disk cache."""
    monkeypatch.setattr(loader, "_loaded", {})
    monkeypatch.setattr(loader, "_warned", set())
    monkeypatch.setattr(cpu_jit, "_kernels", {})
    for name in [n for n in sys.modules if n.startswith("kiln_jit_cpu_")]:
        monkeypatch.delitem(sys.modules, name)


def run(name: str) -> tuple[np.ndarray, cpu_jit.Kernel, dict]:
    """Loads kernel ``name`` and runs it on X: (output, kernel, change of the jit stats)."""
    before = dict(cpu_jit.stats)
    m, c = KERNELS[name]
    kernel = cpu_jit.load(AFFINE.format(m=m, c=c), "affine", signature="cache-fuzz")
    out = np.empty_like(X)
    kernel(out, X)
    np.testing.assert_array_equal(out, X * m + c)
    delta = {k: cpu_jit.stats[k] - before[k] for k in ("compiled", "cache_hits")}
    return out, kernel, delta


def numba_files(cache_dir, name: str) -> tuple[str, str]:
    """(index, data file) of kernel ``name``'s numba cache."""
    m, c = KERNELS[name]
    path = cpu_jit.load(AFFINE.format(m=m, c=c), "affine", signature="cache-fuzz").path
    stem = os.path.splitext(os.path.basename(path))[0]
    folder = os.path.join(os.path.dirname(path), "__pycache__")
    (index,) = glob.glob(os.path.join(folder, f"{stem}.*.nbi"))
    (data,) = glob.glob(os.path.join(folder, f"{stem}.*.nbc"))
    return index, data


def damage(path: str, how: str) -> None:
    with open(path, "rb") as f:
        blob = f.read()
    if how == "empty":
        blob = b""
    elif how == "truncated":
        blob = blob[: len(blob) // 2]
    elif how == "random":
        blob = random.Random(len(blob)).randbytes(len(blob))
    elif how == "flipped byte":
        i = len(blob) * 2 // 3
        blob = blob[:i] + bytes([blob[i] ^ 0x10]) + blob[i + 1:]
    elif how == "not utf-8":
        blob = b"\xff\xfe\x00" + blob
    with open(path, "wb") as f:
        f.write(blob)


def swap(a: str, b: str) -> None:
    with open(a, "rb") as f:
        blob_a = f.read()
    with open(b, "rb") as f:
        blob_b = f.read()
    for path, blob in ((a, blob_b), (b, blob_a)):
        with open(path, "wb") as f:
            f.write(blob)


# ---- damaged entries ---------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["empty", "truncated", "random", "flipped byte", "not utf-8"])
@pytest.mark.parametrize("which", ["index", "data"])
def test_a_damaged_numba_file_is_recompiled_and_rewritten(cache, monkeypatch, which, how):
    assert run("A")[2] == {"compiled": 1, "cache_hits": 0}
    index, data = numba_files(cache, "A")
    damage(index if which == "index" else data, how)
    new_process(monkeypatch)
    with pytest.warns(loader.KernelCacheWarning, match="KILN_CACHE_DIR.*warned once") as rec:
        assert run("A")[2] == {"compiled": 1, "cache_hits": 0}
    assert "damaged" in str(rec[0].message) and str(cache) in str(rec[0].message)
    new_process(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the entry was rewritten: a clean hit, no warning
        assert run("A")[2] == {"compiled": 0, "cache_hits": 1}


@pytest.mark.parametrize("which", ["index", "data"])
def test_files_swapped_between_kernels_never_run_the_other_kernel(cache, monkeypatch, which):
    run("A")
    run("B")
    files = {k: numba_files(cache, k) for k in "AB"}
    pick = 0 if which == "index" else 1
    swap(files["A"][pick], files["B"][pick])
    new_process(monkeypatch)
    with pytest.warns(loader.KernelCacheWarning, match="damaged"):
        run("B")  # both modules loaded: an unchecked cache would run B's code for A
        run("A")  # run() asserts each kernel's own numbers


def test_a_kernel_file_that_is_not_what_kiln_wrote_is_rewritten(cache, monkeypatch):
    _, kernel, _ = run("A")
    with open(kernel.path, "rb") as f:
        text = f.read()
    damage(kernel.path, "not utf-8")
    new_process(monkeypatch)
    assert run("A")[2] == {"compiled": 0, "cache_hits": 1}  # numba's entry is for the text
    with open(kernel.path, "rb") as f:
        assert f.read() == text
    with open(kernel.path, "wb") as f:  # another kernel's text in A's file
        f.write(text.replace(b"* 3.0 + 1.0", b"* 5.0 + -2.0"))
    new_process(monkeypatch)
    run("A")
    with open(kernel.path, "rb") as f:
        assert f.read() == text


def test_a_missing_data_file_is_compiled_again(cache, monkeypatch):
    run("A")
    os.remove(numba_files(cache, "A")[1])
    new_process(monkeypatch)
    assert run("A")[2] == {"compiled": 1, "cache_hits": 0}
    new_process(monkeypatch)
    assert run("A")[2] == {"compiled": 0, "cache_hits": 1}


def test_a_sealed_file_is_checked_against_its_own_name():
    blob = numba_cache.seal("k_a.f-3.py311.nbi", b"body")
    assert numba_cache.unseal("/x/k_a.f-3.py311.nbi", blob) == b"body"
    with pytest.raises(numba_cache.DamagedEntry, match="checksum mismatch"):
        numba_cache.unseal("/x/k_b.f-3.py311.nbi", blob)
    with pytest.raises(numba_cache.DamagedEntry, match="not a kiln cache file"):
        numba_cache.unseal("/x/k_a.f-3.py311.nbi", blob[:10])


# ---- a cache that cannot be used ---------------------------------------------------------------
def test_kiln_cache_dir_naming_a_file_runs_in_memory(cache, monkeypatch):
    cache.parent.mkdir(exist_ok=True)
    cache.write_text("not a folder")
    with pytest.warns(loader.KernelCacheWarning, match="cannot be written.*KILN_CACHE_DIR"):
        _, kernel, delta = run("A")
    assert delta == {"compiled": 1, "cache_hits": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per process
        run("B")
    assert cache.read_text() == "not a folder"
    assert not loader.load_source("cpu", "def f():\n    pass\n", "f", header="").on_disk


def _read_only(monkeypatch) -> None:
    """Every write into the cache fails as on a read-only folder (the suite may run as root,
    which a chmod does not stop)."""
    def refuse(*args, **kwargs):
        raise PermissionError(errno.EROFS, "Read-only file system")

    def write_source(path, text, force=False):
        if not force and loader.same_text(path, text):
            return False
        refuse()

    monkeypatch.setattr(loader, "write_source", write_source)
    monkeypatch.setattr(numba_cache._CheckedFile, "_open_for_write", refuse)
    monkeypatch.setattr(os, "remove", refuse)  # numba_cache discards damaged files with it


def test_a_read_only_cache_still_serves_and_new_kernels_run_in_memory(cache, monkeypatch):
    run("A")
    new_process(monkeypatch)
    _read_only(monkeypatch)
    assert run("A")[2] == {"compiled": 0, "cache_hits": 1}  # the warm entry is read
    with pytest.warns(loader.KernelCacheWarning, match="cannot be written.*Read-only"):
        assert run("B")[2] == {"compiled": 1, "cache_hits": 0}
    damage(numba_files(cache, "A")[1], "random")  # damaged, and cannot even be removed
    new_process(monkeypatch)
    _read_only(monkeypatch)
    with pytest.warns(loader.KernelCacheWarning):
        assert run("A")[2] == {"compiled": 1, "cache_hits": 0}


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root writes into read-only folders")
def test_a_really_read_only_cache_folder(cache, monkeypatch):
    run("A")
    for folder, _, _ in os.walk(cache):
        os.chmod(folder, 0o500)
    try:
        new_process(monkeypatch)
        assert run("A")[2] == {"compiled": 0, "cache_hits": 1}
        with pytest.warns(loader.KernelCacheWarning, match="cannot be written"):
            run("C")
    finally:
        for folder, _, _ in os.walk(cache):
            os.chmod(folder, 0o700)


def test_a_full_disk_leaves_the_kernels_in_memory(cache, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(numba_cache._CheckedFile, "_open_for_write", full)
    with pytest.warns(loader.KernelCacheWarning, match="No space left.*KILN_CACHE_DIR"):
        assert run("A")[2] == {"compiled": 1, "cache_hits": 0}
    monkeypatch.setattr(loader, "write_source", full)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the kernel file cannot be written either: warned once
        assert run("B")[2] == {"compiled": 1, "cache_hits": 0}
    assert not glob.glob(os.path.join(cache, "cpu", "__pycache__", "*"))


def test_the_cache_folders_are_private(cache):
    old = os.umask(0o022)
    try:
        run("A")
    finally:
        os.umask(old)
    for folder in (cache, cache / "cpu", cache / "cpu" / "__pycache__"):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, folder


# ---- fresh processes on a cache damaged at random -----------------------------------------------
CHILD = textwrap.dedent("""
    import json, warnings
    import numpy as np
    import kiln, kiln.ops as K
    warnings.simplefilter("always")
    x = kiln.placeholder((None, 6))
    w = kiln.Variable(np.linspace(-1, 1, 24).reshape(6, 4))
    y = K.softmax(K.tanh(x @ w) * 2.0 + 0.5)
    loss = K.sum(y * y)
    (g,) = kiln.grad(loss, [w])
    f = kiln.function([x], [y, loss], updates=[(w, w - 0.1 * g)])
    a = np.linspace(-2, 2, 30, dtype=np.float32).reshape(5, 6)
    outs = [f(a), f(a)]
    print(json.dumps([[o.tolist() for o in r] for r in outs] + [w.numpy().tolist()]))
""")

DAMAGES = ("empty", "truncated", "random", "flipped byte", "not utf-8", "delete", "swap")


def _child(cache_dir: str) -> tuple[str, str]:
    env = dict(os.environ, KILN_CACHE_DIR=cache_dir)
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1], proc.stderr


def _fuzz(cache_dir: str, rounds: int, seed: int) -> None:
    want, _ = _child(cache_dir)
    json.loads(want)
    rng = random.Random(seed)
    for r in range(rounds):
        # kernel sources, numba's cache and the native loops' object files
        files = sorted(glob.glob(os.path.join(cache_dir, "cpu", "*.py"))
                       + glob.glob(os.path.join(cache_dir, "cpu", "*.o"))
                       + glob.glob(os.path.join(cache_dir, "cpu", "__pycache__", "*")))
        done = []
        for path in rng.sample(files, min(3, len(files))):
            how = rng.choice(DAMAGES)
            if not os.path.exists(path):
                continue
            if how == "delete":
                os.remove(path)
            elif how == "swap":
                ext = os.path.splitext(path)[1]
                others = [p for p in files if p != path and p.endswith(ext)
                          and os.path.exists(p)]
                if not others:
                    continue
                swap(path, rng.choice(others))
            else:
                damage(path, how)
            done.append(f"{how} {os.path.basename(path)}")
        got, err = _child(cache_dir)
        assert got == want, f"round {r}: {done}\n{err[-2000:]}"
        assert "Traceback" not in err, f"round {r}: {done}\n{err[-2000:]}"


def test_fresh_processes_on_a_randomly_damaged_cache_give_the_same_numbers(tmp_path):
    _fuzz(str(tmp_path / "cache"), rounds=3, seed=17)


@pytest.mark.slow
def test_fresh_processes_on_a_randomly_damaged_cache_long(tmp_path):
    _fuzz(str(tmp_path / "cache"), rounds=25, seed=23)
