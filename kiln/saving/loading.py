"""The read side shared by every loader: recognizing a file (HDF5 layouts, ``.keras`` zips),
checking its format version, planning weights and training state against a model, and
applying a checked plan.

Every loader reads and checks everything before it assigns anything, and reads no value
before its declared shape and dtype were compared with the model (docs/security.md).
"""

from __future__ import annotations

import io
import os
import zipfile
import zlib
from typing import Any

import numpy as np

from kiln.saving import state as st
from kiln.saving import weights as wt
from kiln.saving.h5util import (
    JSON_LIMIT,
    FileFormatError,
    attr,
    json_attr,
    open_h5,
)

FORMAT_VERSION = 1
#: The kinds of kiln HDF5 files (the root attribute ``kiln_format``).
KINDS = ("weights", "model", "checkpoint")
#: The largest ``metadata.json`` read from a ``.keras`` file.
METADATA_LIMIT = 1 << 20

_ZIP_ERRORS: tuple[type[BaseException], ...] = (
    zipfile.BadZipFile, OSError, EOFError, RuntimeError, NotImplementedError, ValueError,
    zlib.error)
try:  # pragma: no cover - lzma is optional in some Python builds
    import lzma

    _ZIP_ERRORS += (lzma.LZMAError,)
except ImportError:  # pragma: no cover
    pass


# ---- recognizing a file ---------------------------------------------------------------------
def check_version(h5: Any, source: str) -> str:
    """The file's kind (``kiln_format``), after checking it and ``kiln_format_version``.

    Raises:
        FileFormatError: an unknown kind, a version that is missing, not an integer, below 1
            or newer than :data:`FORMAT_VERSION`.
    """
    kind = attr(h5, "kiln_format")
    if not isinstance(kind, str) or kind not in KINDS:
        raise FileFormatError(f"{source}: attribute 'kiln_format' is {kind!r}; this kiln reads "
                              f"the kinds {list(KINDS)}")
    version = h5.attrs.get("kiln_format_version")
    if isinstance(version, np.ndarray) and version.shape == ():
        version = version[()]
    if version is None or isinstance(version, bool | np.bool_) or \
            not isinstance(version, int | np.integer):
        raise FileFormatError(f"{source}: attribute 'kiln_format_version' is {version!r}; "
                              "expected an integer file format version")
    if int(version) > FORMAT_VERSION:
        raise FileFormatError(f"{source} was written with kiln file format version {version}; "
                              f"this kiln reads versions up to {FORMAT_VERSION}. Upgrade kiln")
    if int(version) < 1:
        raise FileFormatError(f"{source}: unknown kiln file format version {version} (versions "
                              f"are 1 to {FORMAT_VERSION})")
    return kind


def check_metadata(metadata: Any, source: str) -> dict | None:
    """The ``kiln`` entry of a ``.keras`` file's ``metadata.json`` (None for a Keras file),
    with its format version and RNG state checked."""
    if not isinstance(metadata, dict):
        raise FileFormatError(f"{source}: metadata.json should hold a JSON object, received "
                              f"{type(metadata).__name__}")
    meta = metadata.get("kiln")
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise FileFormatError(f"{source}: metadata.json 'kiln' should be an object")
    version = meta.get("format_version", FORMAT_VERSION)
    if isinstance(version, bool) or not isinstance(version, int):
        raise FileFormatError(f"{source}: metadata.json kiln.format_version is {version!r}; "
                              "expected an integer file format version")
    if not 1 <= version <= FORMAT_VERSION:
        raise FileFormatError(f"{source} was written with kiln file format version {version}; "
                              f"this kiln reads versions 1 to {FORMAT_VERSION}")
    if meta.get("rng") is not None:
        st.check_rng_state(meta["rng"], source)
    return meta


def is_zip(path: str, what: str = "load") -> bool:
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


def open_zip(path: str, what: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except _ZIP_ERRORS as exc:
        raise FileFormatError(f"{what}: {path!r} is not a readable .keras zip ({exc})") \
            from exc


def has_member(zf: zipfile.ZipFile, name: str, path: str, what: str) -> None:
    if name not in zf.namelist():
        raise FileFormatError(f"{what}: {path!r} is a zip file without {name!r} (members: "
                              f"{zf.namelist()[:10]}); not a .keras model")


def read_member(zf: zipfile.ZipFile, name: str, path: str, what: str, limit: int) -> bytes:
    """A zip member's bytes, refusing one that declares or inflates to more than ``limit``
    bytes (a decompression bomb) before holding more than ``limit + 1`` of them, and members
    compressed otherwise than stored or deflated (what Keras and kiln write)."""
    has_member(zf, name, path, what)
    info = zf.getinfo(name)
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        # bzip2 and lzma members are inflated without an output bound per read
        raise FileFormatError(f"{what}: {path!r}: member {name!r} uses zip compression method "
                              f"{info.compress_type}; kiln reads stored or deflated members "
                              "only")
    if info.file_size > limit:
        raise FileFormatError(f"{what}: {path!r}: member {name!r} declares {info.file_size} "
                              f"bytes; at most {limit} are read for it (a decompression "
                              "bomb, or a member the model cannot need)")
    try:
        with zf.open(info) as f:
            data = f.read(limit + 1)
    except _ZIP_ERRORS as exc:
        raise FileFormatError(f"{what}: {path!r}: member {name!r} is corrupt ({exc})") from exc
    if len(data) > limit:
        raise FileFormatError(f"{what}: {path!r}: member {name!r} inflates to more than "
                              f"{limit} bytes; refused")
    return data


def weights_budget(model: Any) -> int:
    """The most bytes a weights file for ``model`` can need: every weight as float64, up to
    four optimizer slots per weight (or the optimizer's actual variables, if more), and room
    for HDF5's per-object headers."""
    weights = list(getattr(model, "weights", []) or [])
    elements = sum(int(np.prod(w.shape, dtype=np.int64)) for w in weights)
    opt = st.get_optimizer(model)
    opt_vars = list(getattr(opt, "variables", []) or []) if opt is not None else []
    opt_elements = sum(int(np.prod(v.shape, dtype=np.int64)) for v in opt_vars)
    return (16 << 20) + 8 * (5 * elements + opt_elements) + \
        (64 << 10) * (5 * len(weights) + len(opt_vars))


def state_budget(model: Any) -> int:
    """The most bytes a checkpoint's training state (JSON) can need: callback states may
    hold a copy of the weights (``EarlyStopping(restore_best_weights=True)``), about 32
    characters per value."""
    weights = list(getattr(model, "weights", []) or [])
    return JSON_LIMIT + 64 * sum(int(np.prod(w.shape, dtype=np.int64)) for w in weights)


# ---- weights --------------------------------------------------------------------------------
def weights_source(h5: Any, source: str) -> tuple[str, Any]:
    """Which layout an open HDF5 file has, and the group holding the weights."""
    import h5py

    if "kiln_format" in h5.attrs:
        kind = check_version(h5, source)
        if kind == "weights":
            return "kiln", h5
        if not isinstance(h5.get("model_weights"), h5py.Group):
            raise FileFormatError(f"{source}: the file has no 'model_weights' group "
                                  "(truncated file?)")
        return "kiln", h5["model_weights"]
    if "layer_names" in h5.attrs or "layer_names0" in h5.attrs:
        return "legacy", h5
    if isinstance(h5.get("model_weights"), h5py.Group):
        return "legacy", h5["model_weights"]
    if "layers" in h5 or "vars" in h5 or "_layer_checkpoint_dependencies" in h5:
        return "keras3", h5
    raise FileFormatError(f"{source}: unrecognized HDF5 layout: neither kiln's ('kiln_format' "
                          "attribute), Keras 3's ('layers/' group) nor legacy Keras' "
                          f"('layer_names' attribute); top-level keys: {sorted(h5.keys())[:10]}")


def plan_weights(model: Any, h5: Any, source: str, skip_mismatch: bool = False,
                 what: str = "load_weights") -> list[tuple[Any, np.ndarray]]:
    """Checks all weights of an open HDF5 file against ``model`` (declared shapes and dtypes
    first), reads them and returns the ``(Variable, array)`` pairs to assign (nothing is
    assigned here)."""
    layout, group = weights_source(h5, source)
    if layout == "kiln":
        build = json_attr(h5, "build_config", source=source)
        if build is None:
            config = json_attr(h5, "model_config", source=source)
            build = config.get("build_config") if isinstance(config, dict) else None
        wt.ensure_built(model, build, what)
        return wt.plan(wt.weight_owners(model), wt.read_kiln_group(group), source,
                       skip_mismatch, what=what)
    # kiln's Keras-layout files carry the build config as a root attribute (Keras ignores it)
    build = json_attr(h5, "build_config", source=source) if layout == "keras3" else None
    wt.ensure_built(model, build, what)
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


def open_any(model: Any, path: str, what: str) -> tuple[Any, str]:
    """An open HDF5 file for ``path``; for a ``.keras`` zip, its ``model.weights.h5`` (at most
    :func:`weights_budget` bytes of it)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{what}: no such file {path!r}")
    if is_zip(path, what):
        with open_zip(path, what) as zf:
            data = read_member(zf, "model.weights.h5", path, what, weights_budget(model))
        source = f"{path!r} (model.weights.h5)"
        return open_h5(io.BytesIO(data), what, label=source), source
    return open_h5(path, what), repr(path)


# ---- whole models and checkpoints -----------------------------------------------------------
def plan_kiln_state(model: Any, h5: Any, source: str, with_optimizer: bool,
                    what: str) -> tuple[list, float | None, dict]:
    """Plans a kiln model or checkpoint file: weights, optimizer variables and learning rate,
    and the training state (a dict, its RNG state checked; the rest is checked by
    :func:`kiln.saving.validate.check_training` where it is used)."""
    import h5py

    pairs = plan_weights(model, h5, source, what=what)  # builds an unbuilt model first
    training: Any = {}
    if "training_state" in h5:
        group = h5["training_state"]
        if not isinstance(group, h5py.Group):
            raise FileFormatError(f"{source}: 'training_state' should be a group")
        training = json_attr(group, "state", {}, source, limit=state_budget(model))
    if not isinstance(training, dict):
        raise FileFormatError(f"{source}: training_state should be a dict, received "
                              f"{type(training).__name__}")
    if "rng" in training:
        st.check_rng_state(training["rng"], source)
    lr = None
    if with_optimizer and st.OPTIMIZER_GROUP in h5 and st.get_optimizer(model) is not None:
        group = h5[st.OPTIMIZER_GROUP]
        if not isinstance(group, h5py.Group):
            raise FileFormatError(f"{source}: {st.OPTIMIZER_GROUP!r} should be a group")
        saved = st.read_optimizer(group, source)
        opt_pairs, lr = st.plan_optimizer(model, saved, source, what)
        pairs = pairs + opt_pairs
    wt.check_pairs(pairs, what)
    return pairs, lr, training


def apply(model: Any, pairs: list, lr: float | None, rng: dict | None,
          include_global_rng: bool = False) -> None:
    """Applies a checked plan: weights and optimizer variables, the learning rate, the
    model's dropout stream (and kiln's global generator). Nothing here can fail on the
    file's content: every value was checked."""
    wt.assign(pairs)
    st.set_lr(model, lr)
    st.refresh_scheduled_lr(model)
    if rng:
        st.set_rng_state(model, rng, include_global=include_global_rng)
