"""Saving and loading: weights, whole models and training checkpoints.

Every write goes through :func:`kiln.saving.atomic.atomic_write`; every load reads and checks
everything before it assigns anything. Formats: ``docs/formats.md``.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import warnings
import zipfile
from typing import Any

import numpy as np

from kiln.saving import state as st
from kiln.saving import weights as wt
from kiln.saving.atomic import atomic_write
from kiln.saving.h5util import (
    FileFormatError,
    attr,
    json_attr,
    open_h5,
    require_h5py,
    set_json_attr,
    set_list_attr,
)
from kiln.saving.serialization import deserialize_model, serialize_model

FORMAT_VERSION = 1
KERAS_SCHEMA_VERSION = "3.15.1"  # the Keras release whose file layout kiln writes


def _kiln_version() -> str:
    import kiln

    return str(getattr(kiln, "__version__", "0"))


def _stamp(h5: Any, kind: str) -> None:
    h5.attrs["kiln_format"] = kind
    h5.attrs["kiln_format_version"] = FORMAT_VERSION
    h5.attrs["kiln_version"] = _kiln_version()


def _check_version(h5: Any, source: str) -> str:
    kind = attr(h5, "kiln_format")
    version = h5.attrs.get("kiln_format_version")
    if version is None or int(version) > FORMAT_VERSION:
        raise FileFormatError(f"{source} was written with kiln file format version {version}; "
                              f"this kiln reads versions up to {FORMAT_VERSION}. Upgrade kiln")
    return kind


def _build_config(model: Any) -> Any:
    fn = getattr(model, "get_build_config", None)
    try:
        return fn() if callable(fn) else None
    except Exception:  # noqa: BLE001 - optional information
        return None


def _is_zip(path: str, what: str = "load") -> bool:
    """True for a zip (``.keras``); a file that starts like a zip but is not a readable one
    (truncated) is an error here, not "not an HDF5 file" later."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
        ok = zipfile.is_zipfile(path)
    except OSError:
        return False
    if head == b"PK\x03\x04" and not ok:
        raise FileFormatError(f"{what}: {path!r} starts like a zip (.keras) archive but cannot "
                              "be read as one: the file is truncated or corrupt")
    return ok


# ---- weights ------------------------------------------------------------------------------------
def save_weights(model: Any, filepath: str | os.PathLike, overwrite: bool = True,
                 format: str = "kiln") -> None:  # noqa: A002
    """Saves the model's weights to an HDF5 file (atomically).

    Args:
        model: a model or layer.
        filepath: the target; any name (``.weights.h5`` and ``.h5`` are customary).
        overwrite: if False and the file exists, raise FileExistsError.
        format: ``"kiln"`` (default: weights keyed by layer and weight name, dtypes kept) or
            ``"keras"`` (Keras 3's ``.weights.h5`` layout, loadable by Keras; like Keras, it
            includes the optimizer's variables once the optimizer is built).

    Example:
        >>> model.save_weights("mlp.weights.h5")
        >>> model.load_weights("mlp.weights.h5")
    """
    h5py = require_h5py()
    path = os.fspath(filepath)
    if not overwrite and os.path.exists(path):
        raise FileExistsError(f"save_weights: {path!r} exists and overwrite=False")
    if format not in ("kiln", "keras"):
        raise ValueError(f"save_weights: format must be 'kiln' or 'keras', received {format!r}")

    def write(tmp: str) -> None:
        with h5py.File(tmp, "w") as h5:
            if format == "keras":
                # as Keras' save_weights: the optimizer's variables too, once it is built
                opt = st.get_optimizer(model)
                arrays = st.keras_optimizer_arrays(opt) if opt is not None and getattr(
                    opt, "built", False) else None
                wt.write_keras3_model(h5, model, arrays,
                                      str(getattr(opt, "name", "optimizer")))
                return
            _stamp(h5, "weights")
            build = _build_config(model)
            if build is not None:
                set_json_attr(h5, "build_config", build)
            wt.write_kiln_group(h5, model)

    atomic_write(path, write)


def _weights_source(h5: Any) -> tuple[str, Any]:
    """Which layout an open HDF5 file has, and the group holding the weights."""
    kind = attr(h5, "kiln_format")
    if kind == "weights":
        return "kiln", h5
    if kind in ("model", "checkpoint"):
        if "model_weights" not in h5:
            raise FileFormatError("the file has no 'model_weights' group (truncated file?)")
        return "kiln", h5["model_weights"]
    if "layer_names" in h5.attrs or "layer_names0" in h5.attrs:
        return "legacy", h5
    if "model_weights" in h5:
        return "legacy", h5["model_weights"]
    if "layers" in h5 or "vars" in h5 or "_layer_checkpoint_dependencies" in h5:
        return "keras3", h5
    raise FileFormatError("unrecognized HDF5 layout: neither kiln's ('kiln_format' attribute), "
                          "Keras 3's ('layers/' group) nor legacy Keras' ('layer_names' "
                          f"attribute); top-level keys: {sorted(h5.keys())[:10]}")


def plan_weights(model: Any, h5: Any, source: str, skip_mismatch: bool = False,
                 what: str = "load_weights") -> list[tuple[Any, np.ndarray]]:
    """Reads and checks all weights of an open HDF5 file against ``model``; returns the
    ``(Variable, array)`` pairs to assign (nothing is assigned here)."""
    layout, group = _weights_source(h5)
    if layout == "kiln":
        _check_version(h5, source)
        wt.ensure_built(model, json_attr(h5, "build_config") or (
            (json_attr(h5, "model_config") or {}).get("build_config")), what)
        return wt.plan(wt.weight_owners(model), wt.read_kiln_group(group), source,
                       skip_mismatch, what=what)
    wt.ensure_built(model, None, what)
    if layout == "legacy":
        # the legacy layout lists a layer's weights in Keras' tracking order (Bidirectional:
        # forward then backward), not in the attribute-walk order of .weights.h5
        owners = [wt.Owner(o.key, o.layer, order, order, o.class_name)
                  for o in wt.weight_owners(model)
                  for order in [o.keras_weights if o.key == wt.TOP_LEVEL
                                else wt.keras_legacy_order(o.layer)]]
        return wt.plan(owners, wt.read_legacy_group(group), source, skip_mismatch, what=what)
    file_layers, owners = wt.read_keras3_model(h5, model)
    return wt.plan(owners, file_layers, source, skip_mismatch, by_order=False, what=what)


def _open_any(path: str, what: str) -> tuple[Any, str]:
    """An open HDF5 file for ``path``; for a ``.keras`` zip, its ``model.weights.h5``."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{what}: no such file {path!r}")
    if _is_zip(path, what):
        with zipfile.ZipFile(path) as zf:
            data = _zip_read(zf, "model.weights.h5", path, what)
        return open_h5(io.BytesIO(data), what), f"{path!r} (model.weights.h5)"
    return open_h5(path, what), repr(path)


def load_weights(model: Any, filepath: str | os.PathLike, skip_mismatch: bool = False) -> None:
    """Loads weights saved by kiln or Keras into ``model``, all or nothing.

    Reads kiln's weight, model and checkpoint files, Keras 3 ``.weights.h5`` and ``.keras``
    files, and legacy Keras HDF5 files (weights-only and whole-model). Everything is read and
    checked first (each layer present, weight counts, shapes); only then are the weights
    assigned, so on any error the model keeps its weights.

    Args:
        model: the (built) model or layer.
        filepath: the file.
        skip_mismatch: skip (with a warning) layers that are missing or whose shapes differ,
            instead of raising.

    Raises:
        FileFormatError (a ValueError): not an HDF5 file, truncated, unknown layout.
        ValueError: a layer is missing, or a count or shape differs (the message names the
            layer and both shapes).
    """
    path = os.fspath(filepath)
    h5, source = _open_any(path, "load_weights")
    with h5:
        pairs = plan_weights(model, h5, source, skip_mismatch)
    wt.check_pairs(pairs, "load_weights")
    wt.assign(pairs)


# ---- whole models -------------------------------------------------------------------------------
def _write_kiln_model(h5: Any, model: Any, kind: str, include_config: bool,
                      training: dict | None, include_optimizer: bool = True) -> None:
    _stamp(h5, kind)
    config = None
    if include_config:
        config = serialize_model(model)
        set_json_attr(h5, "model_config", config)
    else:
        build = _build_config(model)
        if build is not None:
            set_json_attr(h5, "build_config", build)
    wt.write_kiln_group(h5.create_group("model_weights"), model)
    opt = st.get_optimizer(model)
    if opt is not None and include_optimizer:
        st.write_optimizer(h5.create_group(st.OPTIMIZER_GROUP), opt)
        if kind == "model" and config is not None:
            _write_keras_training_config(h5, config.get("compile_config"), opt)
    g = h5.create_group("training_state")
    set_json_attr(g, "state", {"rng": st.get_rng_state(model), **(training or {})})


def _write_keras_training_config(h5: Any, compile_config: Any, opt: Any) -> None:
    """What Keras' legacy ``.h5`` loader reads to compile the model and restore the
    optimizer (docs/formats.md §2): the root attribute ``training_config`` (the compile
    config with ``optimizer_config`` = ``{"class_name", "config"}``) and the group
    ``optimizer_weights`` (attribute ``weight_names``; iteration, learning_rate, slots in
    Keras' order). Its datasets are hard links to kiln's ``optimizer/<i>`` (no second copy),
    except ``learning_rate``. kiln itself reads only its own groups."""
    optimizer = (compile_config or {}).get("optimizer") if isinstance(compile_config, dict) \
        else None
    if not isinstance(optimizer, dict) or "class_name" not in optimizer:
        return
    training = {k: v for k, v in compile_config.items() if k != "optimizer"}
    training.setdefault("loss_weights", None)  # Keras' reader requires the key
    training["optimizer_config"] = {"class_name": optimizer["class_name"],
                                    "config": optimizer.get("config", {})}
    set_json_attr(h5, "training_config", training)
    if not getattr(opt, "built", False):
        return
    kiln_group = h5[st.OPTIMIZER_GROUP]
    variables = list(opt.variables)
    prefix = str(getattr(opt, "name", "optimizer") or "optimizer")
    g = h5.create_group("optimizer_weights")
    names: list[str] = []

    def add(label: str, data: Any) -> None:
        label = label.replace("/", "_").replace(":", "_") or "variable"
        base, n = label, 1
        while f"{prefix}/{label}" in names:
            label, n = f"{base}_{n}", n + 1
        names.append(f"{prefix}/{label}")
        g[names[-1]] = data

    def short(var: Any) -> str:
        return str(getattr(var, "name", "") or "").split("/", 1)[-1]

    add("iteration", kiln_group["0"])
    if st.lr_is_fixed(opt):
        add("learning_rate", np.float32(st.current_lr(opt)))
    for i, var in enumerate(variables[1:], start=1):
        add(short(var), kiln_group[str(i)])
    set_list_attr(g, "weight_names", names)


def save_model(model: Any, filepath: str | os.PathLike, overwrite: bool = True,
               include_optimizer: bool = True) -> None:
    """Saves the architecture, weights, compile configuration and optimizer state.

    ``.keras`` paths get Keras 3's zip layout (``config.json``, ``metadata.json``,
    ``model.weights.h5``), loadable by Keras 3 when the model uses layers Keras has. Other
    paths (``.h5``) get kiln's HDF5 layout. See docs/formats.md.

    Args:
        model: the model.
        filepath: the target file.
        overwrite: if False and the file exists, raise FileExistsError.
        include_optimizer: also save the optimizer's variables (default True).

    Example:
        >>> model.save("mlp.keras")
        >>> again = kiln.models.load_model("mlp.keras")
    """
    h5py = require_h5py()
    path = os.fspath(filepath)
    if not overwrite and os.path.exists(path):
        raise FileExistsError(f"save_model: {path!r} exists and overwrite=False")
    if path.endswith(".keras"):
        _save_keras_zip(model, path, include_optimizer)
        return
    serialize_model(model)  # fail before touching the disk if the model is not serializable

    def write(tmp: str) -> None:
        with h5py.File(tmp, "w") as h5:
            _write_kiln_model(h5, model, "model", True, None, include_optimizer)

    atomic_write(path, write)


def _save_keras_zip(model: Any, path: str, include_optimizer: bool) -> None:
    h5py = require_h5py()
    config = serialize_model(model)
    if not include_optimizer:
        config["compile_config"] = None
    opt = st.get_optimizer(model)
    buf = io.BytesIO()
    with h5py.File(buf, "w") as h5:
        arrays = st.keras_optimizer_arrays(opt) if opt is not None and include_optimizer and \
            getattr(opt, "built", False) else None
        wt.write_keras3_model(h5, model, arrays, str(getattr(opt, "name", "optimizer")))
    metadata = {"keras_version": KERAS_SCHEMA_VERSION,
                "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S"),
                "kiln": {"kiln_version": _kiln_version(), "format_version": FORMAT_VERSION,
                         "rng": st.get_rng_state(model)}}
    from kiln.saving.h5util import json_default

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr("metadata.json", json.dumps(metadata, default=json_default))
            zf.writestr("config.json", json.dumps(config, default=json_default))
            zf.writestr("model.weights.h5", buf.getvalue())

    atomic_write(path, write)


def _zip_read(zf: zipfile.ZipFile, name: str, path: str, what: str) -> bytes:
    try:
        info = zf.getinfo(name)
    except KeyError:
        raise FileFormatError(f"{what}: {path!r} is a zip file without {name!r} (members: "
                              f"{zf.namelist()[:10]}); not a .keras model") from None
    if info.file_size > (1 << 32) and info.file_size > 100 * max(info.compress_size, 1):
        raise FileFormatError(f"{what}: {path!r}: member {name!r} declares {info.file_size} "
                              "bytes but stores far less; refusing a decompression bomb")
    try:
        return zf.read(name)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise FileFormatError(f"{what}: {path!r}: member {name!r} is corrupt ({exc})") from exc


def load_model(filepath: str | os.PathLike, custom_objects: dict | None = None,
               compile: bool = True, safe_mode: bool = True) -> Any:  # noqa: A002
    """Loads a model saved by kiln (``.keras``, ``.h5``) or by Keras (``.keras``, legacy
    ``.h5``): architecture, weights and, with ``compile``, the compile configuration and
    optimizer state, so that training continues where it stopped.

    Args:
        filepath: the file (the format is recognized from its content, not its name).
        custom_objects: ``{"ClassName": cls}`` for classes not registered with
            :func:`kiln.saving.register_serializable`.
        compile: compile the model and restore the optimizer (default True).
        safe_mode: refuse configs that would run stored code (Lambda layers).

    Returns:
        The model.

    Example:
        >>> model = kiln.models.load_model("mlp.keras")
    """
    with st.preserve_global_rng():
        return _load_model(os.fspath(filepath), custom_objects, compile, safe_mode)


def _load_model(path: str, custom_objects: dict | None, compile: bool,
                safe_mode: bool) -> Any:  # noqa: A002
    if not os.path.exists(path):
        raise FileNotFoundError(f"load_model: no such file {path!r}")
    if _is_zip(path, "load_model"):
        return _load_keras_zip(path, custom_objects, compile, safe_mode)
    h5 = open_h5(path, "load_model")
    with h5:
        source = repr(path)
        kind = attr(h5, "kiln_format")
        if kind is not None:
            _check_version(h5, source)
            config = json_attr(h5, "model_config")
            if config is None:
                raise FileFormatError(f"load_model: {source} is a kiln {kind} file that holds "
                                      "weights only (no model config); build the model in "
                                      "code and use load_weights (or load_checkpoint)")
            model = deserialize_model(config, custom_objects, compile, safe_mode, source)
            pairs, lr, training = _plan_kiln_state(model, h5, source, compile, "load_model")
            _apply(model, pairs, lr, training.get("rng"))
            return model
        if "model_config" in h5.attrs:
            return _load_legacy_h5(h5, source, custom_objects, compile, safe_mode)
        raise FileFormatError(f"load_model: {source} holds weights only (no model config); "
                              "build the model in code and call model.load_weights()")


def _plan_kiln_state(model: Any, h5: Any, source: str, with_optimizer: bool,
                     what: str) -> tuple[list, float | None, dict]:
    pairs = plan_weights(model, h5, source, what=what)
    lr = None
    if with_optimizer and st.OPTIMIZER_GROUP in h5 and st.get_optimizer(model) is not None:
        saved = st.read_optimizer(h5[st.OPTIMIZER_GROUP])
        opt_pairs, lr = st.plan_optimizer(model, saved, source, what)
        pairs = pairs + opt_pairs
    training = json_attr(h5["training_state"], "state", {}) if "training_state" in h5 else {}
    if "rng" in training:
        st.check_rng_state(training["rng"], source)
    wt.check_pairs(pairs, what)
    return pairs, lr, training


def _apply(model: Any, pairs: list, lr: float | None, rng: dict | None,
           include_global_rng: bool = False) -> None:
    wt.assign(pairs)
    st.set_lr(model, lr)
    st.refresh_scheduled_lr(model)
    if rng:
        st.set_rng_state(model, rng, include_global=include_global_rng)


def _load_keras_zip(path: str, custom_objects: dict | None, compile: bool,
                    safe_mode: bool) -> Any:
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise FileFormatError(f"load_model: {path!r} is not a readable .keras zip ({exc})") \
            from exc
    with zf:
        try:
            config = json.loads(_zip_read(zf, "config.json", path, "load_model"))
        except ValueError as exc:
            if isinstance(exc, FileFormatError):
                raise
            raise FileFormatError(f"load_model: {path!r}: config.json is not valid JSON "
                                  f"({exc})") from exc
        metadata = {}
        if "metadata.json" in zf.namelist():
            try:
                metadata = json.loads(_zip_read(zf, "metadata.json", path, "load_model"))
            except ValueError:
                metadata = {}
        weights = _zip_read(zf, "model.weights.h5", path, "load_model")
    kiln_meta = metadata.get("kiln") if isinstance(metadata, dict) else None
    model = deserialize_model(config, custom_objects, compile, safe_mode, repr(path))
    source = f"{path!r} (model.weights.h5)"
    with open_h5(io.BytesIO(weights), "load_model") as h5:
        pairs = plan_weights(model, h5, source, what="load_model")
        lr = None
        if compile and "optimizer" in h5 and "vars" in h5["optimizer"]:
            arrays = wt.read_keras3_flat_vars(h5["optimizer"]["vars"])[1]
            opt_pairs, lr = st.plan_keras_optimizer(model, arrays, source,
                                                    strict=kiln_meta is not None)
            pairs = pairs + opt_pairs
    wt.check_pairs(pairs, "load_model")
    rng = kiln_meta.get("rng") if isinstance(kiln_meta, dict) else None
    if rng:
        st.check_rng_state(rng, repr(path))
    _apply(model, pairs, lr, rng)
    return model


def _load_legacy_h5(h5: Any, source: str, custom_objects: dict | None, compile: bool,
                    safe_mode: bool) -> Any:
    config = json_attr(h5, "model_config")
    training_config = json_attr(h5, "training_config") if compile else None
    if training_config and compile:
        config = dict(config, compile_config=training_config)
    elif compile:
        warnings.warn(f"load_model: {source} has no training configuration; the model is "
                      "returned uncompiled", stacklevel=3)
    model = deserialize_model(config, custom_objects, compile, safe_mode, source)
    pairs = plan_weights(model, h5, source, what="load_model")
    lr = None
    if compile and "optimizer_weights" in h5 and st.get_optimizer(model) is not None:
        g = h5["optimizer_weights"]
        from kiln.saving.h5util import list_attr, read_dataset

        names = list_attr(g, "weight_names") or []
        try:
            arrays = [read_dataset(g[n]) for n in names]
        except KeyError:
            arrays = []
        opt_pairs, lr = st.plan_keras_optimizer(model, arrays, source, strict=False)
        pairs = pairs + opt_pairs
    wt.check_pairs(pairs, "load_model")
    _apply(model, pairs, lr, None)
    return model


# ---- training checkpoints -----------------------------------------------------------------------
def save_checkpoint(model: Any, filepath: str | os.PathLike, epoch: int = 0, step: int = 0,
                    callbacks: list | None = None, extra: dict | None = None) -> None:
    """Writes a training checkpoint (atomically): weights, optimizer variables (slots and
    iterations) and learning rate, the model's dropout RNG (seed and counter), kiln's global
    NumPy generator (shuffling), ``epoch`` (epochs completed), ``step`` (batches completed in
    the current epoch) and the states of stateful callbacks (``get_state``).

    Args:
        model: the model being trained.
        filepath: the checkpoint file (kiln HDF5 layout).
        epoch: number of completed epochs.
        step: number of completed batches of epoch ``epoch`` (0 at an epoch boundary).
        callbacks: callbacks whose ``get_state()`` is saved (keyed by class name).
        extra: more JSON-able state to store (returned by :func:`load_checkpoint`).

    Example:
        >>> save_checkpoint(model, "ckpt.h5", epoch=3, callbacks=[early_stopping])
    """
    h5py = require_h5py()
    path = os.fspath(filepath)
    opt = st.get_optimizer(model)
    training = {"epoch": int(epoch), "step": int(step),
                "learning_rate": st.current_lr(opt) if opt is not None else None,
                "callbacks": st.get_callback_states(list(callbacks or [])),
                "extra": extra or {}}
    try:
        serialize_model(model)
        include_config = True
    except Exception:  # noqa: BLE001 - checkpoints work for models that cannot be serialized
        include_config = False

    def write(tmp: str) -> None:
        with h5py.File(tmp, "w") as h5:
            _write_kiln_model(h5, model, "checkpoint", include_config, training)

    atomic_write(path, write)


def load_checkpoint(model: Any, filepath: str | os.PathLike, callbacks: list | None = None,
                    restore_global_rng: bool = True) -> dict:
    """Restores a checkpoint written by :func:`save_checkpoint` (or a kiln model file) into
    ``model``, all or nothing, and returns the training position.

    Args:
        model: the model, built and compiled as when the checkpoint was written.
        filepath: the checkpoint.
        callbacks: callbacks to restore with ``set_state`` (matched by class name).
        restore_global_rng: also restore kiln's global NumPy generator (shuffling).

    Returns:
        ``{"epoch", "step", "learning_rate", "callbacks", "extra"}``.
    """
    path = os.fspath(filepath)
    h5 = open_h5(path, "load_checkpoint")
    with h5:
        source = repr(path)
        if attr(h5, "kiln_format") not in ("checkpoint", "model"):
            raise FileFormatError(f"load_checkpoint: {source} is not a kiln checkpoint (use "
                                  "load_weights for weight files)")
        pairs, lr, training = _plan_kiln_state(model, h5, source, True, "load_checkpoint")
    states = training.get("callbacks") or {}
    if not isinstance(states, dict):
        raise FileFormatError(f"load_checkpoint: {source}: callback states are not a dict")
    _apply(model, pairs, lr, training.get("rng"), include_global_rng=restore_global_rng)
    if callbacks:
        st.set_callback_states(list(callbacks), states)
    return {"epoch": int(training.get("epoch", 0)), "step": int(training.get("step", 0)),
            "learning_rate": training.get("learning_rate"), "callbacks": states,
            "extra": training.get("extra") or {}}
