"""kiln's HDF5 weight store on plain layers: layout, round trips, all-or-nothing loading and
clear errors (oracle: the arrays that were saved; the documented layout)."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
from saving_helpers import Stack, randomize, values

from kiln.saving import FORMAT_VERSION, FileFormatError, load_weights, save_weights


def _model(seed=0, sizes=(4, 3, 2), names=("a", "b")):
    m = Stack(sizes, names=list(names))
    randomize(m, seed)
    return m


def test_round_trip_restores_values_and_dtypes(tmp_path):
    m = _model(0)
    saved = values(m)
    path = tmp_path / "w.weights.h5"
    save_weights(m, path)
    other = _model(1)
    load_weights(other, path)
    for a, b, w in zip(saved, values(other), other.weights):
        np.testing.assert_array_equal(a, b)
        assert b.dtype == np.dtype(w.dtype)


def test_layout_is_documented_one(tmp_path):
    m = _model(0)
    path = tmp_path / "w.h5"
    save_weights(m, path)
    with h5py.File(path, "r") as f:
        assert f.attrs["kiln_format"] == "weights"
        assert int(f.attrs["kiln_format_version"]) == FORMAT_VERSION
        assert [n.decode() if isinstance(n, bytes) else n for n in f.attrs["layer_names"]] == \
            ["a", "b"]
        g = f["a"]
        names = [n.decode() if isinstance(n, bytes) else n for n in g.attrs["weight_names"]]
        assert names == ["w", "b", "stat", "count"]
        assert g.attrs["class_name"] == "Affine"
        assert f["a/w"].dtype == np.float32 and f["a/w"].shape == (4, 3)
        assert f["a/stat"].dtype == np.float64
        assert f["a/count"].dtype == np.int64 and f["a/count"].shape == ()
        np.testing.assert_array_equal(f["b/w"][()], m.blocks[1].w.numpy())


def test_trainable_flag_does_not_change_order(tmp_path):
    m = _model(0)
    m.blocks[0].trainable = False  # weights() order changes; the file order must not
    path = tmp_path / "w.h5"
    save_weights(m, path)
    other = _model(1)
    load_weights(other, path)
    for a, b in zip(m.blocks[0]._weights, other.blocks[0]._weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_names_generated_differently_match_in_order(tmp_path):
    m = _model(0, names=("x1", "x2"))
    path = tmp_path / "w.h5"
    save_weights(m, path)
    other = _model(1, names=("y1", "y2"))
    load_weights(other, path)
    for a, b in zip(values(m), values(other)):
        np.testing.assert_array_equal(a, b)


def _unchanged(model, before):
    for a, b in zip(before, values(model)):
        np.testing.assert_array_equal(a, b)


def test_shape_mismatch_names_layer_and_both_shapes(tmp_path):
    path = tmp_path / "w.h5"
    save_weights(_model(0, sizes=(4, 3, 2)), path)
    other = _model(1, sizes=(4, 5, 2))
    before = values(other)
    with pytest.raises(ValueError) as info:
        load_weights(other, path)
    msg = str(info.value)
    assert "'a'" in msg and "(4, 5)" in msg and "(4, 3)" in msg, msg
    _unchanged(other, before)


def test_mismatch_in_a_later_layer_leaves_earlier_layers_unchanged(tmp_path):
    path = tmp_path / "w.h5"
    save_weights(_model(0, sizes=(4, 3, 2)), path)
    other = _model(1, sizes=(4, 3, 5))
    before = values(other)
    with pytest.raises(ValueError, match=r"'b'.*\(3, 5\).*\(3, 2\)"):
        load_weights(other, path)
    _unchanged(other, before)


def test_skip_mismatch_loads_the_rest(tmp_path):
    path = tmp_path / "w.h5"
    src = _model(0, sizes=(4, 3, 2))
    save_weights(src, path)
    other = _model(1, sizes=(4, 3, 5))
    before_b = [w.numpy() for w in other.blocks[1].weights]
    with pytest.warns(UserWarning, match="skipped"):
        load_weights(other, path, skip_mismatch=True)
    for a, b in zip(src.blocks[0].weights, other.blocks[0].weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(before_b, other.blocks[1].weights):
        np.testing.assert_array_equal(a, b.numpy())


def test_missing_layer_is_named(tmp_path):
    path = tmp_path / "w.h5"
    save_weights(_model(0, sizes=(4, 3, 2)), path)
    other = Stack((4, 3, 2, 2), names=["a", "b", "extra"])
    before = values(other)
    with pytest.raises(ValueError, match="'extra'.*has no weights in"):
        load_weights(other, path)
    _unchanged(other, before)


def test_file_with_extra_layers_is_refused(tmp_path):
    path = tmp_path / "w.h5"
    save_weights(Stack((4, 3, 2, 2), names=["a", "b", "c"]), path)
    other = _model(1)
    before = values(other)
    with pytest.raises(ValueError, match=r"\['c'\].*does not have"):
        load_weights(other, path)
    _unchanged(other, before)


def test_not_an_hdf5_file(tmp_path):
    path = tmp_path / "w.h5"
    path.write_text("hello, I am not HDF5\n" * 10)
    m = _model(0)
    before = values(m)
    with pytest.raises(FileFormatError, match="not an HDF5 file"):
        load_weights(m, path)
    _unchanged(m, before)


def test_truncated_file(tmp_path):
    path = tmp_path / "w.h5"
    save_weights(_model(0, sizes=(64, 64, 64)), path)
    data = path.read_bytes()
    for cut in (len(data) // 2, len(data) - 100):
        bad = tmp_path / f"cut{cut}.h5"
        bad.write_bytes(data[:cut])
        m = _model(1, sizes=(64, 64, 64))
        before = values(m)
        with pytest.raises(FileFormatError):
            load_weights(m, bad)
        _unchanged(m, before)


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        load_weights(_model(0), "/nonexistent/w.h5")


def test_newer_format_version_is_refused(tmp_path):
    path = tmp_path / "w.h5"
    save_weights(_model(0), path)
    with h5py.File(path, "a") as f:
        f.attrs["kiln_format_version"] = FORMAT_VERSION + 1
    with pytest.raises(FileFormatError, match="format version"):
        load_weights(_model(1), path)


def test_unknown_hdf5_layout(tmp_path):
    path = tmp_path / "w.h5"
    with h5py.File(path, "w") as f:
        f["something"] = np.zeros(3)
    with pytest.raises(FileFormatError, match="unrecognized HDF5 layout"):
        load_weights(_model(0), path)


def test_overwrite_false(tmp_path):
    path = tmp_path / "w.h5"
    save_weights(_model(0), path)
    with pytest.raises(FileExistsError):
        save_weights(_model(0), path, overwrite=False)


def test_keras_layout_round_trip(tmp_path):
    m = _model(0)
    path = tmp_path / "w.weights.h5"
    save_weights(m, path, format="keras")
    with h5py.File(path, "r") as f:
        assert "layers/affine/vars/0" in f and "layers/affine_1/vars/3" in f
        assert f["layers/affine/vars"].attrs["name"] == "a"
    other = _model(1)
    load_weights(other, path)
    for a, b in zip(values(m), values(other)):
        np.testing.assert_array_equal(a, b)


def test_no_temp_files_left(tmp_path):
    save_weights(_model(0), tmp_path / "w.h5")
    assert os.listdir(tmp_path) == ["w.h5"]
