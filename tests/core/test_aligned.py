"""Host arrays starting a cache line (kiln/core/aligned.py): the Variables' values and a CPU
plan's buffers. Oracles: the data pointer's remainder, NumPy's own arrays' values."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.core import aligned
from kiln.core.backends.cpu.runtime import poison


def _offset(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0] % aligned.ALIGN


@pytest.mark.parametrize("shape", [(), 0, 1, 7, (3, 5), (784, 512), (2, 0, 3)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int64", "bool",
                                   "complex64", "float16"])
def test_empty_starts_a_cache_line(shape, dtype):
    for _ in range(4):  # several allocations: malloc's offsets vary
        a = aligned.empty(shape, dtype)
        assert a.shape == np.empty(shape).shape and a.dtype == np.dtype(dtype)
        assert a.flags.c_contiguous and a.flags.writeable
        if a.size:
            assert _offset(a) == 0
            a[...] = 1
            assert (a == 1).all()


def test_non_numeric_dtypes_are_plain_arrays():
    a = aligned.empty((3,), object)
    assert a.dtype == object and a.shape == (3,)
    s = aligned.copy(np.array(["a", "bc"]), "<U2")
    assert s.tolist() == ["a", "bc"]


def test_copy_converts_like_numpy():
    src = [[1.5, -2.25], [3.0, 4.0]]
    got = aligned.copy(src, "float32")
    np.testing.assert_array_equal(got, np.array(src, np.float32))
    assert got.dtype == np.float32 and _offset(got) == 0
    f = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    got = aligned.copy(f, "float64")
    assert got.flags.c_contiguous and np.array_equal(got, f)
    got[0, 0] = 99.0
    assert f[0, 0] == 0.0  # a copy


def test_variables_and_plan_buffers_start_a_cache_line():
    for shape in [(784, 512), (512,), (10,), (3, 3, 1, 32)]:
        v = kiln.Variable(np.ones(shape))
        assert _offset(v.value) == 0 and v.value.dtype == np.float32
        np.testing.assert_array_equal(v.numpy(), np.ones(shape, np.float32))
    assert _offset(poison.empty((1000, 3), np.float32)) == 0
    model = kiln.Sequential([kiln.layers.Input((20,)), kiln.layers.Dense(24)])
    assert all(_offset(w.value) == 0 for w in model.weights)


@pytest.mark.parametrize("shape,dtype", [((7, 33, 5), np.float32), ((1000,), np.float64),
                                         ((0, 3), np.int32)])
def test_zeros_are_zero_and_start_a_cache_line(shape, dtype):
    a = aligned.zeros(shape, dtype)
    assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous
    assert a.size == 0 or a.ctypes.data % aligned.ALIGN == 0
    np.testing.assert_array_equal(a, np.zeros(shape, dtype))


def _vma_flags(address: int) -> list[str]:
    """The ``VmFlags`` of the mapping holding ``address`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.parametrize("nbytes", [aligned.HUGE_MIN, aligned.HUGE_MIN + 12,
                                    3 * aligned.HUGE_PAGE + 4100])
def test_large_arrays_start_a_huge_page(nbytes):
    for _ in range(3):
        a = aligned.empty(nbytes // 4, np.float32)
        assert a.__array_interface__["data"][0] % aligned.HUGE_PAGE == 0
        a[...] = np.arange(a.size, dtype=np.float32)
        assert a[-1] == a.size - 1 and a.flags.c_contiguous
    small = aligned.empty(aligned.HUGE_MIN // 4 - 16, np.float32)
    assert _offset(small) == 0  # smaller ones: a cache line only


def _thp_madvise() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


@pytest.mark.skipif(not _thp_madvise(), reason="no transparent huge pages on this kernel")
def test_a_large_array_lies_in_a_mapping_advised_for_huge_pages():
    """The smallest array starting a huge page (2 MiB) lies in a byte buffer of 4 MiB or
    more, which NumPy advises for huge pages (``hg``) where its hint is on. (A small array's
    mapping may carry the flag too: malloc can place it where a freed large buffer was.)"""
    core = getattr(np, "_core", None) or np.core
    if not core.multiarray._get_madvise_hugepage():
        pytest.skip("NumPy's huge page hint is off (NUMPY_MADVISE_HUGEPAGE=0)")
    a = aligned.empty(aligned.HUGE_MIN // 4, np.float32)
    assert "hg" in _vma_flags(a.__array_interface__["data"][0])
