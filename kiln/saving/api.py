"""Saving and loading: weights, whole models and training checkpoints.

Every write goes through :func:`kiln.saving.atomic.atomic_write`; every load reads and checks
everything before it assigns anything (:mod:`kiln.saving.loading`, :mod:`kiln.saving.validate`),
and refuses what a file must not do (docs/security.md). Formats: ``docs/formats.md``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.saving import loading, validate
from kiln.saving import state as st
from kiln.saving import weights as wt
from kiln.saving.atomic import atomic_write
from kiln.saving.h5util import (
    FileFormatError,
    attr,
    guard,
    json_attr,
    list_attr,
    open_h5,
    require_h5py,
    set_json_attr,
    set_list_attr,
    stored,
)
from kiln.saving.keras_zip import KERAS_SCHEMA_VERSION, load_keras_zip, save_keras_zip
from kiln.saving.loading import FORMAT_VERSION
from kiln.saving.serialization import deserialize_model, serialize_model

__all__ = ["FORMAT_VERSION", "KERAS_SCHEMA_VERSION", "save_weights", "load_weights",
           "save_model", "load_model", "save_checkpoint", "load_checkpoint",
           "deserialize_model", "serialize_model"]


def _kiln_version() -> str:
    import kiln

    return str(getattr(kiln, "__version__", "0"))


def _stamp(h5: Any, kind: str) -> None:
    h5.attrs["kiln_format"] = kind
    h5.attrs["kiln_format_version"] = FORMAT_VERSION
    h5.attrs["kiln_version"] = _kiln_version()


def _build_config(model: Any) -> Any:
    fn = getattr(model, "get_build_config", None)
    try:
        return fn() if callable(fn) else None
    except Exception:  # noqa: BLE001 - optional information
        return None


def _no_extra(where: str, kwargs: dict) -> None:
    if kwargs:
        raise TypeError(f"{where}: unexpected keyword argument(s) {sorted(kwargs)}")


# ---- weights ------------------------------------------------------------------------------------
def save_weights(model: Any, filepath: str | os.PathLike, overwrite: bool = True,
                 max_shard_size: Any = None, *, format: str | None = None,  # noqa: A002
                 **kwargs: Any) -> None:
    """Saves the model's weights to an HDF5 file (atomically).

    A ``*.weights.h5`` path gets Keras 3's layout by default, the one
    ``keras.Model.load_weights`` reads for that name; other paths get kiln's own layout.
    :func:`load_weights` reads both (and Keras' legacy ``.h5``).

    Args:
        model: a model or layer.
        filepath: the target; any name (``.weights.h5`` and ``.h5`` are customary).
        overwrite: if False and the file exists, raise FileExistsError.
        max_shard_size: not supported (kiln writes one file): a value raises ValueError.
        format: None (default: ``"keras"`` for a ``.weights.h5`` path, else ``"kiln"``),
            ``"keras"`` (Keras 3's ``.weights.h5`` layout, loadable by Keras: layers keyed
            by class name and counter, variables in Keras' order; like Keras, it includes
            the optimizer's variables once the optimizer is built) or ``"kiln"`` (kiln's
            layout: weights keyed by layer and weight name, dtypes and the build config
            kept).

    Example:
        >>> model.save_weights("mlp.weights.h5")
        >>> model.load_weights("mlp.weights.h5")
    """
    h5py = require_h5py()
    path = os.fspath(filepath)
    if not overwrite and os.path.exists(path):
        raise FileExistsError(f"save_weights: {path!r} exists and overwrite=False")
    if max_shard_size is not None:
        raise ValueError(f"save_weights: max_shard_size={max_shard_size!r} is not supported by "
                         "kiln (the weights are written to one file)")
    _no_extra("save_weights", kwargs)
    if format is None:
        format = "keras" if path.endswith(".weights.h5") else "kiln"  # noqa: A001
    if format not in ("kiln", "keras"):
        raise ValueError(f"save_weights: format must be None, 'kiln' or 'keras', received "
                         f"{format!r}")

    def write(tmp: str) -> None:
        with h5py.File(tmp, "w") as h5:
            if format == "keras":
                # as Keras' save_weights: the optimizer's variables too, once it is built
                opt = st.get_optimizer(model)
                arrays = st.keras_optimizer_arrays(opt) if opt is not None and getattr(
                    opt, "built", False) else None
                wt.write_keras3_model(h5, model, arrays,
                                      str(getattr(opt, "name", "optimizer")))
                build = _build_config(model)
                if build is not None:  # lets load_weights build an unbuilt model
                    set_json_attr(h5, "build_config", build)
                return
            _stamp(h5, "weights")
            build = _build_config(model)
            if build is not None:
                set_json_attr(h5, "build_config", build)
            wt.write_kiln_group(h5, model)

    atomic_write(path, write)


def load_weights(model: Any, filepath: str | os.PathLike, skip_mismatch: bool = False,
                 **kwargs: Any) -> None:
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
        FileFormatError (a ValueError): not an HDF5 file, truncated, unknown layout, a file
            that refers to other files (external links or storage, virtual datasets), a
            ``.keras`` member larger than the model can need.
        ValueError: a layer is missing, or a count or shape differs (the message names the
            layer and both shapes; checked on the declared shapes, before any value is
            read).
    """
    _no_extra("load_weights", kwargs)
    path = os.fspath(filepath)
    h5, source = loading.open_any(model, path, "load_weights")
    with h5, guard(source, "load_weights"):
        pairs = loading.plan_weights(model, h5, source, skip_mismatch)
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
               zipped: bool | None = None, *, include_optimizer: bool = True,
               **kwargs: Any) -> None:
    """Saves the architecture, weights, compile configuration and optimizer state.

    ``.keras`` paths get Keras 3's zip layout (``config.json``, ``metadata.json``,
    ``model.weights.h5``), loadable by Keras 3 when the model uses layers Keras has. Other
    paths (``.h5``) get kiln's HDF5 layout. See docs/formats.md.

    Args:
        model: the model.
        filepath: the target file.
        overwrite: if False and the file exists, raise FileExistsError.
        zipped: None (the format follows the path), True for a ``.keras`` path; kiln writes
            no unzipped ``.keras`` folder, so False with a ``.keras`` path (or True with
            another) raises ValueError.
        include_optimizer: also save the optimizer's variables (default True).

    Example:
        >>> model.save("mlp.keras")
        >>> again = kiln.models.load_model("mlp.keras")
    """
    h5py = require_h5py()
    path = os.fspath(filepath)
    if not overwrite and os.path.exists(path):
        raise FileExistsError(f"save_model: {path!r} exists and overwrite=False")
    _no_extra("save_model", kwargs)
    if zipped is not None and bool(zipped) != path.endswith(".keras"):
        raise ValueError(f"save_model: zipped={zipped!r} is not supported for {path!r} (kiln "
                         "zips .keras files and writes other paths as HDF5)")
    if path.endswith(".keras"):
        save_keras_zip(model, path, include_optimizer)
        return
    serialize_model(model)  # fail before touching the disk if the model is not serializable

    def write(tmp: str) -> None:
        with h5py.File(tmp, "w") as h5:
            _write_kiln_model(h5, model, "model", True, None, include_optimizer)

    atomic_write(path, write)


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
        safe_mode: refuse, before anything is built, configs that would run stored code
            (Lambda layers, serialized lambdas). With False such layers are still refused
            (kiln never runs stored code); see docs/security.md.

    Returns:
        The model.

    Raises:
        FileFormatError (a ValueError): the file is damaged, of an unknown format or
            version, refers to other files, declares more data than the model can need, or
            its config cannot be rebuilt; the message names the file.
        ValueError: a weight or optimizer variable does not fit the rebuilt model.

    Example:
        >>> model = kiln.models.load_model("mlp.keras")
    """
    with st.preserve_global_rng():
        return _load_model(os.fspath(filepath), custom_objects, compile, safe_mode)


def _load_model(path: str, custom_objects: dict | None, compile: bool,
                safe_mode: bool) -> Any:  # noqa: A002
    if not os.path.exists(path):
        raise FileNotFoundError(f"load_model: no such file {path!r}")

    def rebuild(config: Any, source: str) -> Any:
        return _rebuild(config, source, custom_objects, compile, safe_mode)

    if loading.is_zip(path, "load_model"):
        return load_keras_zip(path, custom_objects, compile, safe_mode, rebuild)
    source, what = repr(path), "load_model"
    with open_h5(path, what) as h5:
        with guard(source, what):
            kind = loading.check_version(h5, source) if "kiln_format" in h5.attrs else None
            if kind is None and "model_config" not in h5.attrs:
                raise FileFormatError(f"load_model: {source} holds weights only (no model "
                                      "config); build the model in code and call "
                                      "model.load_weights()")
            config = json_attr(h5, "model_config", source=source)
            training_config = json_attr(h5, "training_config", source=source) \
                if kind is None and compile else None
        if kind is not None:
            if config is None:
                raise FileFormatError(f"load_model: {source} is a kiln {kind} file that holds "
                                      "weights only (no model config); build the model in "
                                      "code and use load_weights (or load_checkpoint)")
            model = rebuild(config, source)
            with guard(source, what):
                pairs, lr, training = loading.plan_kiln_state(model, h5, source, compile, what)
            loading.apply(model, pairs, lr, training.get("rng"))
            return model
        return _load_legacy_h5(h5, source, config, training_config, rebuild, compile)


def _rebuild(config: Any, source: str, custom_objects: dict | None, compile: bool,
             safe_mode: bool) -> Any:  # noqa: A002
    """The model of a config read from ``source``; a config that the classes it names
    cannot be built from is a FileFormatError naming the file."""
    try:
        return deserialize_model(config, custom_objects, compile, safe_mode, source)
    except (KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        raise FileFormatError(f"load_model: {source}: the model cannot be rebuilt from its "
                              f"config ({type(exc).__name__}: {exc})") from exc


def _load_legacy_h5(h5: Any, source: str, config: Any, training_config: Any, rebuild: Any,
                    compile: bool) -> Any:  # noqa: A002
    if training_config and compile:
        if not isinstance(config, dict) or not isinstance(training_config, dict):
            raise FileFormatError(f"load_model: {source}: model_config and training_config "
                                  "should be JSON objects")
        config = dict(config, compile_config=training_config)
    elif compile:
        warnings.warn(f"load_model: {source} has no training configuration; the model is "
                      "returned uncompiled", stacklevel=4)
    model = rebuild(config, source)
    with guard(source, "load_model"):
        pairs = loading.plan_weights(model, h5, source, what="load_model")
        lr = None
        if compile and "optimizer_weights" in h5 and st.get_optimizer(model) is not None:
            g = h5["optimizer_weights"]
            names = list_attr(g, "weight_names") or []
            arrays = [stored(g[n]) for n in names] if all(n in g for n in names) else []
            opt_pairs, lr = st.plan_keras_optimizer(model, arrays, source, strict=False)
            pairs = pairs + opt_pairs
    wt.check_pairs(pairs, "load_model")
    loading.apply(model, pairs, lr, None)
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
                    restore_global_rng: bool = True,
                    check: Callable[[dict], None] | None = None) -> dict:
    """Restores a checkpoint written by :func:`save_checkpoint` (or a kiln model file) into
    ``model``, all or nothing, and returns the training position.

    Everything is checked before anything is applied: weights and optimizer variables
    (counts, declared shapes and dtypes), the learning rate, the epoch and step, the RNG
    streams (only NumPy's own bit generators), and each callback's saved state; on any
    error the model, its optimizer, its random streams and the callbacks are unchanged.

    Args:
        model: the model, built and compiled as when the checkpoint was written.
        filepath: the checkpoint.
        callbacks: callbacks to restore with ``set_state`` (matched by class name).
        restore_global_rng: also restore kiln's global NumPy generator (shuffling).
        check: called with the returned dict after the file is checked and before anything
            is applied; an exception there leaves everything unchanged (BackupAndRestore
            checks its own entries of ``extra`` with it).

    Returns:
        ``{"epoch", "step", "learning_rate", "callbacks", "extra"}``.

    Raises:
        FileFormatError: the file is not a kiln checkpoint, or a field is invalid (the
            message names the file and the field).
        ValueError: weights or optimizer variables do not fit the model.
    """
    path = os.fspath(filepath)
    what = "load_checkpoint"
    with open_h5(path, what) as h5, guard(repr(path), what):
        source = repr(path)
        if attr(h5, "kiln_format") not in ("checkpoint", "model"):
            raise FileFormatError(f"load_checkpoint: {source} is not a kiln checkpoint (use "
                                  "load_weights for weight files)")
        loading.check_version(h5, source)
        pairs, lr, training = loading.plan_kiln_state(model, h5, source, True, what)
    info = validate.check_training(training, source)
    if callbacks:
        validate.check_callback_states(model, list(callbacks), info["callbacks"], source)
    if check is not None:
        check(info)
    loading.apply(model, pairs, lr, training.get("rng"), include_global_rng=restore_global_rng)
    if callbacks:
        st.set_callback_states(list(callbacks), info["callbacks"])
    return info
