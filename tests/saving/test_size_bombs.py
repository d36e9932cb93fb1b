"""Small files that declare or inflate to gigabytes (issue 17, item 4) are refused before
their data is read: every declared shape and dtype is compared with the model first, and
``.keras`` members are capped by what the model can need.

Oracles: the specific error naming the expected and declared shapes (or the declared and
allowed sizes), and a guard that fails the test if h5py is asked to read any dataset of more
than a million elements (or zipfile to open a bomb member); then the model, the optimizer and
the file unchanged.
"""

from __future__ import annotations

import os
import struct
import warnings
import zipfile

import h5py
import numpy as np
import pytest
from hostile_helpers import (
    assert_unchanged,
    digest,
    edit_h5_bytes,
    first_layer_group,
    snapshot,
    trained,
    write_zip,
    zip_members,
)

import kiln
from kiln.saving import FileFormatError, load_checkpoint, load_weights, save_checkpoint

HUGE = (32768, 16384)  # 2 GiB of float32
BIG_READ = 10**6


@pytest.fixture
def no_big_reads(monkeypatch):
    """Fails the test if a dataset of more than BIG_READ elements is read."""
    real_getitem, real_direct = h5py.Dataset.__getitem__, h5py.Dataset.read_direct

    def check(ds):
        if ds.shape is not None and int(np.prod(ds.shape, dtype=np.int64)) > BIG_READ:
            raise AssertionError(f"read of dataset {ds.name} declared {ds.shape}")

    def getitem(self, *args, **kwargs):
        check(self)
        return real_getitem(self, *args, **kwargs)

    def read_direct(self, *args, **kwargs):
        check(self)
        return real_direct(self, *args, **kwargs)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", getitem)
    monkeypatch.setattr(h5py.Dataset, "read_direct", read_direct)


@pytest.fixture(scope="module")
def source_model():
    return trained()


def _huge(group, name, shape=HUGE, dtype="float32"):
    """Replaces ``group[name]`` by a dataset declaring ``shape`` with no stored data (the
    file stays a few KiB; reading it would allocate the whole array)."""
    if name in group:
        del group[name]
    group.create_dataset(name, shape=shape, dtype=dtype, chunks=(256, 256)
                         if len(shape) == 2 else True, compression="gzip")


def _file(tmp_path, model, kind):
    path = tmp_path / {"weights": "w.weights.h5", "keras_weights": "k.weights.h5",
                       "legacy": "legacy.h5", "model": "m.h5", "checkpoint": "c.h5"}[kind]
    if kind == "keras_weights":
        kiln.saving.save_weights(model, path, format="keras")
    elif kind == "model":
        model.save(path)
    elif kind == "checkpoint":
        save_checkpoint(model, path, epoch=1)
    else:  # kiln's own layout (a .weights.h5 path gets Keras' by default)
        model.save_weights(path, format="kiln")
    if kind == "legacy":  # without kiln's stamp, the same layout is Keras' legacy one
        with h5py.File(path, "a") as f:
            del f.attrs["kiln_format"], f.attrs["kiln_format_version"]
    return path


def _kernel(f, kind):
    if kind == "keras_weights":
        return f["layers/dense/vars"], "0"
    g = first_layer_group(f)
    return g, g.attrs["weight_names"][0]


@pytest.mark.parametrize("kind", ["weights", "keras_weights", "legacy", "model", "checkpoint"])
def test_declared_huge_weight_is_refused_before_reading(tmp_path, source_model, no_big_reads,
                                                        kind):
    path = _file(tmp_path, source_model, kind)
    with h5py.File(path, "a") as f:
        _huge(*_kernel(f, kind))
    assert os.path.getsize(path) < 256 << 10  # a small file declaring 2 GiB
    target = trained()
    before, sha = snapshot(target), digest(path)
    loads = [lambda: load_weights(target, path)]
    if kind == "model":
        loads.append(lambda: kiln.models.load_model(path))
    if kind == "checkpoint":
        loads.append(lambda: load_checkpoint(target, path))
    for load in loads:
        with pytest.raises(ValueError, match=r"expects shape \(4, 5\).*has shape "
                                             r"\(32768, 16384\)") as info:
            load()
        assert os.path.basename(str(path)) in str(info.value)
    assert_unchanged(target, before)
    assert digest(path) == sha


def test_declared_huge_layer_the_model_lacks(tmp_path, source_model, no_big_reads):
    path = _file(tmp_path, source_model, "weights")
    with h5py.File(path, "a") as f:
        names = [n for n in f.attrs["layer_names"]] + ["ghost"]
        f.attrs["layer_names"] = names
        g = f.create_group("ghost")
        g.attrs["weight_names"] = ["w"]
        g.attrs["class_name"] = "Dense"
        _huge(g, "w")
    target = trained()
    before = snapshot(target)
    with pytest.raises(ValueError, match=r"has no weights in .*'ghost'\]"):
        load_weights(target, path)
    assert_unchanged(target, before)


def test_skip_mismatch_skips_a_declared_huge_weight_without_reading_it(tmp_path, source_model,
                                                                       no_big_reads):
    path = _file(tmp_path, source_model, "weights")
    with h5py.File(path, "a") as f:
        _huge(*_kernel(f, "weights"))
    target = trained(epochs=2)
    with pytest.warns(UserWarning, match=r"\(4, 5\).*\(32768, 16384\).*skipped"):
        load_weights(target, path, skip_mismatch=True)
    # the other layer was loaded (oracle: the source model's weights)
    np.testing.assert_array_equal(target.layers[-1].weights[0].numpy(),
                                  source_model.layers[-1].weights[0].numpy())


@pytest.mark.parametrize("dtype", ["S8", h5py.string_dtype(), [("a", "f4"), ("b", "i4")]])
def test_non_numeric_weight_dtype_is_refused_before_reading(tmp_path, source_model, dtype):
    path = _file(tmp_path, source_model, "weights")
    with h5py.File(path, "a") as f:
        g, name = _kernel(f, "weights")
        del g[name]
        g.create_dataset(name, shape=(4, 5), dtype=dtype)
    target = trained()
    before = snapshot(target)
    with pytest.raises(ValueError, match="expected a numeric array"):
        load_weights(target, path)
    assert_unchanged(target, before)


@pytest.mark.parametrize("kind", ["model", "checkpoint"])
@pytest.mark.parametrize("slot", ["0", "1", "4"])
def test_declared_huge_optimizer_variable(tmp_path, source_model, no_big_reads, kind, slot):
    path = _file(tmp_path, source_model, kind)
    with h5py.File(path, "a") as f:
        _huge(f["optimizer"], slot, HUGE if slot != "0" else (2**31,), "int64"
              if slot == "0" else "float32")
    target = trained()
    before, sha = snapshot(target), digest(path)
    load = (lambda: load_checkpoint(target, path)) if kind == "checkpoint" else \
        (lambda: kiln.models.load_model(path))
    with pytest.raises(ValueError, match=r"optimizer variable.*expects shape.*has shape "
                                         r"\((32768, 16384|2147483648,)\)"):
        load()
    assert_unchanged(target, before)
    assert digest(path) == sha


def test_declared_huge_optimizer_variable_in_keras_zip(tmp_path, source_model, no_big_reads):
    path = tmp_path / "m.keras"
    source_model.save(path)
    members = zip_members(path)
    members["model.weights.h5"] = edit_h5_bytes(
        members["model.weights.h5"], tmp_path, lambda f: _huge(f["optimizer/vars"], "2"))
    write_zip(path, members)
    with pytest.raises(ValueError, match=r"optimizer variable.*\(4, 5\).*\(32768, 16384\)"):
        kiln.models.load_model(path)


def test_declared_huge_legacy_optimizer_weights(tmp_path, source_model, no_big_reads):
    """A Keras legacy whole-model file (kiln's model file without its stamp): an optimizer
    slot of the wrong size makes the optimizer start fresh, with a warning, unread."""
    path = _file(tmp_path, source_model, "model")
    with h5py.File(path, "a") as f:
        del f.attrs["kiln_format"], f.attrs["kiln_format_version"]
        g = f["optimizer_weights"]
        name = g.attrs["weight_names"][2]
        _huge(g, name)
    with pytest.warns(UserWarning, match=r"\(4, 5\).*\(32768, 16384\).*starts fresh"):
        model = kiln.models.load_model(path)
    for a, b in zip(source_model.weights, model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert int(model.optimizer.iterations.numpy()) == 0


@pytest.mark.parametrize("where", ["model_config", "training_state"])
def test_declared_huge_json_dataset(tmp_path, source_model, no_big_reads, where):
    kind = "model" if where == "model_config" else "checkpoint"
    path = _file(tmp_path, source_model, kind)
    with h5py.File(path, "a") as f:
        g = f if where == "model_config" else f["training_state"]
        attr = "model_config" if where == "model_config" else "state"
        del g.attrs[attr]
        g.create_dataset(f"__json__{attr}", shape=(2**31,), dtype="uint8", chunks=(2**20,),
                         compression="gzip")
        g.attrs[attr] = f"__json_dataset__:__json__{attr}"
    target = trained()
    before = snapshot(target)
    load = (lambda: load_checkpoint(target, path)) if kind == "checkpoint" else \
        (lambda: kiln.models.load_model(path))
    with pytest.raises(FileFormatError, match=rf"{attr}.*declares 2147483648 bytes of JSON"):
        load()
    assert_unchanged(target, before)


# ---- .keras members -----------------------------------------------------------------------
@pytest.fixture
def opened(monkeypatch):
    """The names of the zip members opened for reading."""
    names: list[str] = []
    real_open = zipfile.ZipFile.open

    def open_(self, name, *args, **kwargs):
        names.append(name if isinstance(name, str) else name.filename)
        return real_open(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", open_)
    return names


@pytest.mark.parametrize("member,size,limit", [
    ("config.json", 32 << 20, 16 << 20),
    ("metadata.json", 4 << 20, 1 << 20),
    ("model.weights.h5", 64 << 20, None),
])
def test_keras_zip_bomb_in_each_member(tmp_path, source_model, opened, member, size, limit):
    path = tmp_path / "m.keras"
    source_model.save(path)
    members = zip_members(path)
    members[member] = b" " * size  # deflates to a few KiB
    write_zip(path, members, zipfile.ZIP_DEFLATED)
    assert os.path.getsize(path) < 1 << 20
    target = trained()
    before = snapshot(target)
    loads = [lambda: kiln.models.load_model(path)]
    if member == "model.weights.h5":
        loads.append(lambda: load_weights(target, path))
    for load in loads:
        opened.clear()
        with pytest.raises(FileFormatError, match=rf"m\.keras.*{member}.*declares {size} "
                                                  rf"bytes; at most {limit or ''}"):
            load()
        assert member not in opened  # refused on its declared size, never inflated
    assert_unchanged(target, before)


def _lie_about_size(path, member, declared):
    """Rewrites the uncompressed size of ``member`` in the zip's local header and central
    directory (what a crafted bomb does to pass a size check)."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    local = info.header_offset
    assert data[local:local + 4] == b"PK\x03\x04"
    struct.pack_into("<I", data, local + 22, declared)
    central = data.find(b"PK\x01\x02")
    while central >= 0:
        name_len = struct.unpack_from("<H", data, central + 28)[0]
        if data[central + 46:central + 46 + name_len] == member.encode():
            struct.pack_into("<I", data, central + 24, declared)
            break
        central = data.find(b"PK\x01\x02", central + 4)
    path.write_bytes(bytes(data))


def test_keras_zip_member_lying_about_its_size(tmp_path, source_model):
    path = tmp_path / "m.keras"
    source_model.save(path)
    members = zip_members(path)
    members["model.weights.h5"] = b"\x00" * (64 << 20)
    write_zip(path, members, zipfile.ZIP_DEFLATED)
    _lie_about_size(path, "model.weights.h5", 1000)
    with pytest.raises(FileFormatError, match=r"m\.keras.*model\.weights\.h5"):
        kiln.models.load_model(path)


def test_keras_zip_bzip2_member_is_refused(tmp_path, source_model):
    path = tmp_path / "m.keras"
    source_model.save(path)
    write_zip(path, zip_members(path), zipfile.ZIP_BZIP2)
    with pytest.raises(FileFormatError, match="compression method 12"):
        kiln.models.load_model(path)


def test_a_larger_model_still_loads_from_keras_zip(tmp_path):
    """The cap follows the model: a model whose weights member is larger than a fixed cap
    for small models would be still loads (oracle: its own weights)."""
    model = kiln.Sequential([kiln.Input((1024,)), kiln.layers.Dense(1024),
                             kiln.layers.Dense(1024)])
    model.compile(kiln.optimizers.Adam(0.01), "mse")
    assert model.optimizer.built  # its slots are in the file too
    path = tmp_path / "big.keras"
    model.save(path)
    with zipfile.ZipFile(path) as zf:
        assert zf.getinfo("model.weights.h5").file_size > 16 << 20
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = kiln.models.load_model(path)
    for a, b in zip(model.weights, again.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
