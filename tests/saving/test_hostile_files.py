"""Files that must be refused (issue 17, items 3 and 7), by every loader, with a
FileFormatError naming the file and what is wrong, the model (weights, optimizer, random
streams) and the file unchanged.

* item 3: values living outside the file: HDF5 external links (at the root, in a layer's
  group, in place of a weight), external raw storage (another local file's bytes), virtual
  datasets, and filters that would load a plugin library;
* item 7: damaged files (zeroed bodies, truncations, random bytes), kiln format versions that
  are not integers or unknown, unknown kinds, and documents nested too deeply (JSON configs,
  training states, HDF5 groups).

Oracle: the specific error (type and message) and the snapshot of the model before the call.
"""

from __future__ import annotations

import json
import os

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

KINDS = ["weights", "keras_weights", "model", "checkpoint"]


@pytest.fixture(scope="module")
def source_model():
    return trained()


def _save(model, tmp_path, kind):
    path = {"weights": tmp_path / "w.weights.h5", "keras_weights": tmp_path / "k.weights.h5",
            "model": tmp_path / "m.h5", "checkpoint": tmp_path / "c.h5"}[kind]
    if kind == "weights":  # kiln's own layout (a .weights.h5 path gets Keras' by default)
        model.save_weights(path, format="kiln")
    elif kind == "keras_weights":
        kiln.saving.save_weights(model, path, format="keras")
    elif kind == "model":
        model.save(path)
    else:
        save_checkpoint(model, path, epoch=1)
    return path


def _load(kind, path, target):
    """Loads ``path`` the way its kind is loaded; load_weights for every kind too."""
    if kind == "model":
        return kiln.models.load_model(path)
    if kind == "checkpoint":
        return load_checkpoint(target, path)
    return load_weights(target, path)


def _weight_group(f, kind):
    if kind == "keras_weights":
        return f["layers/dense/vars"]
    return first_layer_group(f)


def _refused(kind, path, target, match, weights_too=True):
    """The load is refused with ``match``, the file's name in the message, nothing changed;
    ``load_weights`` refuses it too (unless what is wrong is beyond the weights)."""
    before, sha = snapshot(target), digest(path)
    with pytest.raises(FileFormatError, match=match) as info:
        _load(kind, path, target)
    assert os.path.basename(str(path)) in str(info.value)
    if kind != "model" and weights_too:
        with pytest.raises(FileFormatError, match=match):
            load_weights(target, path)
    assert_unchanged(target, before)
    assert digest(path) == sha
    return info.value


def _secret_files(tmp_path):
    """Another HDF5 file and a raw file whose bytes have the shape of the first kernel."""
    values = np.arange(20, dtype="float32").reshape(4, 5) + 1000
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["data"] = values
    raw = tmp_path / "secret.bin"
    raw.write_bytes(values.tobytes())
    return other, raw, values


# ---- item 3: values from other files --------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["root", "layer_group", "weight"])
def test_external_links_are_refused(tmp_path, source_model, kind, where):
    other, _, _ = _secret_files(tmp_path)
    path = _save(source_model, tmp_path, kind)
    with h5py.File(path, "a") as f:
        g = _weight_group(f, kind)
        if where == "root":
            f["extra"] = h5py.ExternalLink(str(other), "/data")
        elif where == "layer_group":
            g["notes"] = h5py.ExternalLink(str(other), "/data")
        else:  # the weight itself: today its bytes would be loaded from other.h5
            name = "0" if kind == "keras_weights" else g.attrs["weight_names"][0]
            del g[name]
            g[name] = h5py.ExternalLink(str(other), "/data")
    err = _refused(kind, path, trained(), "external link")
    assert "other.h5" in str(err)


@pytest.mark.parametrize("kind", KINDS)
def test_external_raw_storage_is_refused(tmp_path, source_model, kind):
    _, raw, values = _secret_files(tmp_path)
    path = _save(source_model, tmp_path, kind)
    with h5py.File(path, "a") as f:
        g = _weight_group(f, kind)
        name = "0" if kind == "keras_weights" else g.attrs["weight_names"][0]
        del g[name]
        g.create_dataset(name, shape=(4, 5), dtype="float32",
                         external=[(str(raw), 0, values.nbytes)])
    err = _refused(kind, path, trained(), "external file")
    assert "secret.bin" in str(err)


@pytest.mark.parametrize("kind", KINDS)
def test_virtual_datasets_are_refused(tmp_path, source_model, kind):
    other, _, _ = _secret_files(tmp_path)
    path = _save(source_model, tmp_path, kind)
    with h5py.File(path, "a") as f:
        g = _weight_group(f, kind)
        name = "0" if kind == "keras_weights" else g.attrs["weight_names"][0]
        del g[name]
        layout = h5py.VirtualLayout(shape=(4, 5), dtype="float32")
        layout[:] = h5py.VirtualSource(str(other), "data", shape=(4, 5))
        g.create_virtual_dataset(name, layout)
    _refused(kind, path, trained(), "virtual dataset")


def test_a_virtual_dataset_anywhere_in_the_file_is_refused(tmp_path, source_model):
    other, _, _ = _secret_files(tmp_path)
    path = _save(source_model, tmp_path, "weights")
    with h5py.File(path, "a") as f:
        layout = h5py.VirtualLayout(shape=(4, 5), dtype="float32")
        layout[:] = h5py.VirtualSource(str(other), "data", shape=(4, 5))
        f.create_group("unused/deeper").create_virtual_dataset("v", layout)
    _refused("weights", path, trained(), "virtual dataset")


def test_a_filter_plugin_is_refused(tmp_path, source_model):
    path = _save(source_model, tmp_path, "weights")
    with h5py.File(path, "a") as f:
        f.create_dataset("packed", shape=(4, 5), dtype="float32", chunks=(4, 5),
                         compression=307, allow_unknown_filter=True)  # bzip2's plugin id
    _refused("weights", path, trained(), "filter 307")


def test_soft_links_inside_the_file_still_load(tmp_path, source_model):
    """Only links to other files are refused: a soft link within the file reads its own
    values (oracle: the saved weights)."""
    path = _save(source_model, tmp_path, "weights")
    with h5py.File(path, "a") as f:
        g = first_layer_group(f)
        name = g.attrs["weight_names"][0]
        f["copy_of_kernel"] = g[name][()]
        del g[name]
        g[name] = h5py.SoftLink("/copy_of_kernel")
    target = trained(epochs=2)
    load_weights(target, path)
    for a, b in zip(source_model.weights, target.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_keras_zip_with_an_external_link_in_its_weights(tmp_path, source_model):
    other, _, _ = _secret_files(tmp_path)
    path = tmp_path / "m.keras"
    source_model.save(path)
    members = zip_members(path)

    def edit(f):
        del f["layers/dense/vars/0"]
        f["layers/dense/vars/0"] = h5py.ExternalLink(str(other), "/data")

    members["model.weights.h5"] = edit_h5_bytes(members["model.weights.h5"], tmp_path, edit)
    write_zip(path, members)
    target, sha = trained(), digest(path)
    before = snapshot(target)
    for load in (lambda: kiln.models.load_model(path), lambda: load_weights(target, path)):
        with pytest.raises(FileFormatError, match=r"m\.keras.*external link.*other\.h5"):
            load()
    assert_unchanged(target, before)
    assert digest(path) == sha


# ---- item 7: damaged files ------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("keep", [8, 64, 512, 2048, 4096])
def test_zeroed_body(tmp_path, source_model, kind, keep):
    path = _save(source_model, tmp_path, kind)
    data = path.read_bytes()
    path.write_bytes(data[:keep] + bytes(len(data) - keep))
    _refused(kind, path, trained(), "truncated or corrupt|not an HDF5 file|unrecognized")


@pytest.mark.parametrize("kind", KINDS)
def test_truncated_anywhere(tmp_path, source_model, kind):
    path = _save(source_model, tmp_path, kind)
    data = path.read_bytes()
    for i in range(1, 8):
        path.write_bytes(data[: len(data) * i // 8])
        _refused(kind, path, trained(), "truncated or corrupt|not an HDF5 file")


@pytest.mark.parametrize("kind", ["weights", "model", "checkpoint"])
@pytest.mark.parametrize("signature", [False, True])
def test_random_bytes(tmp_path, kind, signature):
    rng = np.random.default_rng(7)
    path = tmp_path / "r.h5"
    body = rng.integers(0, 256, size=8192, dtype=np.uint8).tobytes()
    path.write_bytes((b"\x89HDF\r\n\x1a\n" if signature else b"") + body)
    _refused(kind, path, trained(), "truncated or corrupt|not an HDF5 file")


@pytest.mark.parametrize("kind", ["weights", "model", "checkpoint"])
@pytest.mark.parametrize("version", ["1", 1.5, 1.0, True, b"1", np.array([1, 1])])
def test_non_integer_format_version(tmp_path, source_model, kind, version):
    path = _save(source_model, tmp_path, kind)
    with h5py.File(path, "a") as f:
        f.attrs["kiln_format_version"] = version
    _refused(kind, path, trained(), "kiln_format_version.*expected an integer")


@pytest.mark.parametrize("kind", ["weights", "model", "checkpoint"])
@pytest.mark.parametrize("version,match", [(0, "unknown kiln file format version 0"),
                                           (-3, "unknown kiln file format version -3"),
                                           (2, "format version 2.*up to 1")])
def test_unknown_format_version(tmp_path, source_model, kind, version, match):
    path = _save(source_model, tmp_path, kind)
    with h5py.File(path, "a") as f:
        f.attrs["kiln_format_version"] = version
    _refused(kind, path, trained(), match)


@pytest.mark.parametrize("value", ["weights2", 7])
def test_unknown_kiln_format_kind(tmp_path, source_model, value):
    path = _save(source_model, tmp_path, "weights")
    with h5py.File(path, "a") as f:
        f.attrs["kiln_format"] = value
    _refused("weights", path, trained(), "'kiln_format' is")


def _keras_with(tmp_path, model, **members):
    path = tmp_path / "m.keras"
    model.save(path)
    content = zip_members(path)
    content.update(members)
    write_zip(path, content)
    return path


@pytest.mark.parametrize("member", ["config.json", "metadata.json"])
@pytest.mark.parametrize("depth", [200_000, 300])
def test_deeply_nested_json_in_keras_zip(tmp_path, source_model, member, depth):
    """200,000 levels used to end in a bare RecursionError; 300 would parse but recurse
    through the loader."""
    path = _keras_with(tmp_path, source_model,
                       **{member: ("[" * depth + "]" * depth).encode()})
    with pytest.raises(FileFormatError, match=rf"m\.keras.*{member}.*nested"):
        kiln.models.load_model(path)


@pytest.mark.parametrize("text", [b"{not json", b"\xff\xfe\x00garbage", b'"a string"'])
def test_invalid_config_json(tmp_path, source_model, text):
    path = _keras_with(tmp_path, source_model, **{"config.json": text})
    with pytest.raises((FileFormatError, ValueError), match=r"m\.keras"):
        kiln.models.load_model(path)


@pytest.mark.parametrize("version", ["1", 1.5, None, 99, 0])
def test_keras_zip_metadata_format_version(tmp_path, source_model, version):
    path = tmp_path / "m.keras"
    source_model.save(path)
    meta = json.loads(zip_members(path)["metadata.json"])
    meta["kiln"]["format_version"] = version
    path = _keras_with(tmp_path, source_model, **{"metadata.json": json.dumps(meta).encode()})
    with pytest.raises(FileFormatError, match=r"m\.keras.*(format_version|format version)"):
        kiln.models.load_model(path)


def test_config_that_cannot_be_built_names_the_file(tmp_path, source_model):
    config = {"class_name": "Sequential", "config": {
        "name": "s", "layers": [{"class_name": "Dense", "config": {"name": "d"}}]}}
    path = _keras_with(tmp_path, source_model, **{"config.json": json.dumps(config).encode()})
    with pytest.raises(FileFormatError, match=r"m\.keras.*cannot be rebuilt"):
        kiln.models.load_model(path)


def _deep(depth):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [300, 200_000])
def test_deeply_nested_model_config_attribute(tmp_path, source_model, depth):
    path = _save(source_model, tmp_path, "model")
    text = "[" * depth + "]" * depth
    with h5py.File(path, "a") as f:
        del f.attrs["model_config"]
        f.create_dataset("__json__model_config", data=np.frombuffer(text.encode(), np.uint8))
        f.attrs["model_config"] = "__json_dataset__:__json__model_config"
    _refused("model", path, trained(), "model_config.*nested")


@pytest.mark.parametrize("depth", [300, 200_000])
def test_deeply_nested_training_state(tmp_path, source_model, depth):
    path = _save(source_model, tmp_path, "checkpoint")
    text = '{"epoch": 1, "extra": ' + "[" * depth + "]" * depth + "}"
    with h5py.File(path, "a") as f:
        g = f["training_state"]
        del g.attrs["state"]
        g.create_dataset("__json__state", data=np.frombuffer(text.encode(), np.uint8))
        g.attrs["state"] = "__json_dataset__:__json__state"
    _refused("checkpoint", path, trained(), "state.*nested", weights_too=False)


def test_deeply_nested_groups_in_keras_weights(tmp_path, source_model):
    path = _save(source_model, tmp_path, "keras_weights")
    with h5py.File(path, "a") as f:
        g = f["layers/dense"]
        for _ in range(100):
            g = g.create_group("sub")
        g.create_dataset("vars/0", data=np.zeros(3, "float32"))
    _refused("keras_weights", path, trained(), "nested more than 32 groups")


@pytest.mark.parametrize("shape", ["cycle", "doubling"])
def test_groups_linked_twice_in_keras_weights(tmp_path, source_model, shape):
    """A group hard-linked into its own subtree, or 30 levels each linking the next twice
    (2**30 paths if walked naively), is refused at once."""
    path = _save(source_model, tmp_path, "keras_weights")
    with h5py.File(path, "a") as f:
        g = f["layers/dense"]
        if shape == "cycle":
            g["loop"] = g
        else:
            for _ in range(30):
                nxt = g.create_group("a")
                g["b"] = nxt
                g = nxt
    _refused("keras_weights", path, trained(), "linked more than once")


def test_json_dataset_pointing_elsewhere(tmp_path, source_model):
    path = _save(source_model, tmp_path, "model")
    with h5py.File(path, "a") as f:
        f.attrs["model_config"] = "__json_dataset__:/model_weights"
    _refused("model", path, trained(), "not a 1-d uint8 dataset")


def test_a_group_where_a_weight_should_be(tmp_path, source_model):
    path = _save(source_model, tmp_path, "weights")
    with h5py.File(path, "a") as f:
        g = first_layer_group(f)
        name = g.attrs["weight_names"][0]
        del g[name]
        g.create_group(name)
    _refused("weights", path, trained(), "should be a dataset")
