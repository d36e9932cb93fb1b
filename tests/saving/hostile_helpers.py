"""Helpers for the tests of refused files (test_hostile_files, test_size_bombs,
test_restore_all_or_nothing, tests/callbacks/test_backup_all_or_nothing): a small trained
model, a snapshot of everything a load could change, and edits of saved files."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import zipfile

import h5py
import numpy as np

import kiln
from kiln import layers, random_state


def small_model(units: int = 5) -> kiln.Sequential:
    """4 -> units (relu) -> dropout -> 2, compiled with Adam: a model with optimizer slots,
    a dropout stream and a learning rate."""
    m = kiln.Sequential([kiln.Input((4,)), layers.Dense(units, activation="relu"),
                         layers.Dropout(0.2), layers.Dense(2)])
    m.compile(kiln.optimizers.Adam(0.01), "mse")
    return m


def data(n: int = 16):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(n, 4)).astype("float32"),
            rng.normal(size=(n, 2)).astype("float32"))


def trained(units: int = 5, epochs: int = 1) -> kiln.Sequential:
    m = small_model(units)
    x, y = data()
    m.fit(x, y, epochs=epochs, batch_size=4, verbose=0)
    return m


def snapshot(model, callbacks=()) -> dict:
    """Everything a refused load must leave as it was."""
    opt = model.optimizer
    return {
        "weights": [w.numpy().copy() for w in model.weights],
        "optimizer": None if opt is None else [v.numpy().copy() for v in opt.variables],
        "lr": None if opt is None else float(opt.learning_rate_variable.value),
        "rng": (model._rng_seed, model._rng_counter),
        "global": copy.deepcopy(random_state.numpy_rng().bit_generator.state),
        "global_seed": random_state._state.get("seed"),
        "legacy": np.random.get_state()[1].copy(),
        "callbacks": [copy.deepcopy(cb.get_state()) for cb in callbacks],
    }


def assert_unchanged(model, before: dict, callbacks=()) -> None:
    after = snapshot(model, callbacks)
    assert len(after["weights"]) == len(before["weights"])
    for a, b in zip(before["weights"], after["weights"]):
        np.testing.assert_array_equal(a, b)
    if before["optimizer"] is not None:
        assert len(after["optimizer"]) == len(before["optimizer"])
        for a, b in zip(before["optimizer"], after["optimizer"]):
            np.testing.assert_array_equal(a, b)
        assert after["lr"] == before["lr"]
    assert after["rng"] == before["rng"]
    assert after["global"] == before["global"]
    assert after["global_seed"] == before["global_seed"]
    np.testing.assert_array_equal(after["legacy"], before["legacy"])  # np.random not reseeded
    assert after["callbacks"] == before["callbacks"]


def digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


# ---- editing files ----------------------------------------------------------------------------
def first_layer_group(f: h5py.File) -> h5py.Group:
    """The first weight-carrying layer group of a kiln weights/model/checkpoint file."""
    root = f["model_weights"] if "model_weights" in f else f
    for name in root.attrs["layer_names"]:
        name = name.decode() if isinstance(name, bytes) else name
        g = root[name]
        if len(g.attrs["weight_names"]):
            return g
    raise AssertionError("no layer with weights")


def read_state(path) -> dict:
    with h5py.File(path, "r") as f:
        return json.loads(f["training_state"].attrs["state"])


def write_state(path, state) -> None:
    """Rewrites a checkpoint's training_state JSON (as an attribute; JSON allows NaN)."""
    with h5py.File(path, "a") as f:
        f["training_state"].attrs["state"] = json.dumps(state)


def zip_members(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def write_zip(path, members: dict[str, bytes], method=zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def edit_h5_bytes(data: bytes, tmp_dir, edit) -> bytes:
    """Applies ``edit(h5py.File)`` to an HDF5 file given as bytes; returns the new bytes."""
    path = os.path.join(tmp_dir, "member.h5")
    with open(path, "wb") as f:
        f.write(data)
    with h5py.File(path, "a") as f:
        edit(f)
    with open(path, "rb") as f:
        out = f.read()
    os.remove(path)
    return out


def in_memory_h5(edit) -> bytes:
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        edit(f)
    return buf.getvalue()
