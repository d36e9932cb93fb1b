"""``.keras`` files (Keras 3's zip layout, docs/formats.md §5): writing and loading.

Loading reads ``config.json`` and ``metadata.json`` (each capped in size and nesting),
rebuilds the model, and only then reads ``model.weights.h5``, capped by what that model can
need (:func:`kiln.saving.loading.weights_budget`): a small file inflating to gigabytes is
refused before it is inflated.
"""

from __future__ import annotations

import datetime
import io
import json
from typing import Any

from kiln.saving import keras_assets, loading
from kiln.saving import state as st
from kiln.saving import weights as wt
from kiln.saving.atomic import atomic_write
from kiln.saving.h5util import (
    JSON_LIMIT,
    guard,
    json_default,
    load_json,
    open_h5,
    require_h5py,
)
from kiln.saving.serialization import serialize_model

KERAS_SCHEMA_VERSION = "3.15.1"  # the Keras release whose file layout kiln writes
WEIGHTS = "model.weights.h5"


def _kiln_version() -> str:
    import kiln

    return str(getattr(kiln, "__version__", "0"))


def save_keras_zip(model: Any, path: str, include_optimizer: bool) -> None:
    """Writes ``model`` as a ``.keras`` zip (every member stored, not deflated)."""
    import zipfile

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
                "kiln": {"kiln_version": _kiln_version(),
                         "format_version": loading.FORMAT_VERSION,
                         "rng": st.get_rng_state(model)}}

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr("metadata.json", json.dumps(metadata, default=json_default))
            zf.writestr("config.json", json.dumps(config, default=json_default))
            zf.writestr(WEIGHTS, buf.getvalue())

    atomic_write(path, write)


def load_keras_zip(path: str, custom_objects: dict | None, compile: bool,  # noqa: A002
                   safe_mode: bool, rebuild: Any) -> Any:
    """Loads a ``.keras`` file; ``rebuild(config, source)`` turns its config into a model
    (``kiln.saving.api``'s, which names the file in its errors)."""
    what, source = "load_model", repr(path)
    with loading.open_zip(path, what) as zf:
        config = load_json(loading.read_member(zf, "config.json", path, what, JSON_LIMIT),
                           source, "config.json")
        metadata: Any = {}
        if "metadata.json" in zf.namelist():
            metadata = load_json(loading.read_member(zf, "metadata.json", path, what,
                                                     loading.METADATA_LIMIT),
                                 source, "metadata.json")
        kiln_meta = loading.check_metadata(metadata, source)
        loading.has_member(zf, WEIGHTS, path, what)
        keras_assets.inject(config, keras_assets.vocabularies(zf, path, what))
        model = rebuild(config, source)
        weights = loading.read_member(zf, WEIGHTS, path, what, loading.weights_budget(model))
    source = f"{path!r} ({WEIGHTS})"
    with open_h5(io.BytesIO(weights), what, label=source) as h5, guard(source, what):
        pairs = loading.plan_weights(model, h5, source, what=what)
        lr = None
        if compile and "optimizer" in h5 and "vars" in h5["optimizer"]:
            arrays = wt.read_keras3_flat_vars(h5["optimizer"]["vars"])[1]
            opt_pairs, lr = st.plan_keras_optimizer(model, arrays, source,
                                                    strict=kiln_meta is not None)
            pairs = pairs + opt_pairs
    wt.check_pairs(pairs, what)
    rng = kiln_meta.get("rng") if kiln_meta is not None else None
    loading.apply(model, pairs, lr, rng)
    return model

