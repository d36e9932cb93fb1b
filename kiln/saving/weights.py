"""Weight stores in HDF5: kiln's layout (read and write), Keras 3's ``.weights.h5`` layout
(read and write) and the legacy Keras HDF5 layout (read).

Loading is planned completely before anything is assigned: the readers list each layer's
datasets without reading them (:class:`~kiln.saving.h5util.Stored`: declared shape and
dtype), :func:`plan` checks layer presence, weight counts, shapes and dtypes against the
model and only then reads the values, and returns ``(Variable, array)`` pairs; :func:`assign`
then writes them. An error in the plan leaves the model as it was, and a file declaring
arrays the model cannot hold is refused before any of its data is read. The layouts are
documented in ``docs/formats.md``.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.saving.h5util import FileFormatError, Stored, attr, list_attr, set_list_attr, stored

TOP_LEVEL = "top_level_model_weights"
#: Deepest group nesting read from a Keras 3 weights file (Keras nests a few levels per
#: wrapper layer: ``layers/bidirectional/forward_layer/cell/vars``).
MAX_GROUP_DEPTH = 32


# ---- the model side -------------------------------------------------------------------------
def keras_snake_case(name: str) -> str:
    """Keras' ``naming.to_snake_case`` (``Conv2D`` -> ``conv2d``, ``BatchNormalization`` ->
    ``batch_normalization``): the key of a layer in Keras 3 weight files."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _name_key(name: str) -> str:
    """Keras' attribute walk order: public names sorted, private (``_x``) names last."""
    return f"~{name}" if name.startswith("_") else name


def _is_layer(obj: Any) -> bool:
    from kiln.layers.base import Layer

    return isinstance(obj, Layer)


def _own_weights(layer: Any) -> list[Any]:
    return list(getattr(layer, "_weights", []))


def kiln_order(layer: Any) -> list[Any]:
    """A layer's weights in creation order (own, then sublayers'), independent of the current
    ``trainable`` flags: the order of kiln's own files."""
    if hasattr(layer, "_all_weights"):
        return [w for w, _ in layer._all_weights()]
    return list(getattr(layer, "weights", []))


def keras_own_order(layer: Any) -> list[Any]:
    """Own weights as Keras stores them: trainable variables first (``Variable.trainable``,
    whatever the layer's own ``trainable`` flag), then the others."""
    own = _own_weights(layer)
    return [w for w in own if w.trainable] + [w for w in own if not w.trainable]


def sublayer_tree(layer: Any) -> list[tuple[str, Any]]:
    """``(attribute path, sublayer)`` in Keras' walk order (sorted attributes, private last;
    lists become ``attr/<snake_class>[_n]``; a Sequential's/Functional's are ``layers/...``)."""
    out: list[tuple[str, Any]] = []
    model = {"Sequential", "Functional"} & {c.__name__ for c in type(layer).__mro__}
    for key, value in sorted(vars(layer).items(), key=lambda kv: _name_key(kv[0])):
        if key.startswith("__") or key in ("_inbound", "_eager_cache", "_weights",
                                            "_regularizers"):
            continue
        key = "layers" if model and key == "_layers" else key
        if _is_layer(value) and value is not layer:
            out.append((key, value))
        elif isinstance(value, list | tuple | dict):
            items = list(value.values()) if isinstance(value, dict) else list(value)
            used: dict[str, int] = {}
            for item in items:
                if _is_layer(item) and item is not layer:
                    base = keras_snake_case(type(item).__name__)
                    used[base] = n = used.get(base, -1) + 1
                    out.append((f"{key}/{base}" if n == 0 else f"{key}/{base}_{n}", item))
    return out


def keras_legacy_order(layer: Any) -> list[Any]:
    """A layer's weights in the order of Keras' legacy HDF5 files (``_legacy_weights`` =
    ``trainable_weights + non_trainable_weights``, both filtered from ``layer.weights``:
    own weights (trainable first), then each sublayer's in tracking order, i.e. the order the
    sublayers were assigned: Bidirectional's forward then backward layer,
    MultiHeadAttention's query, key, value, output). A frozen layer lists ``weights`` as is."""
    tracked = _tracked(layer, set())
    if not getattr(layer, "trainable", True) or not hasattr(layer, "_all_weights"):
        return tracked
    effective = {id(w): t for w, t in layer._all_weights()}
    return [w for w in tracked if effective.get(id(w), w.trainable)] + \
        [w for w in tracked if not effective.get(id(w), w.trainable)]


def _tracked(layer: Any, seen: set[int]) -> list[Any]:
    """Keras' ``Layer.weights``: own variables (trainable first), then the sublayers'."""
    if id(layer) in seen:
        return []
    seen.add(id(layer))
    out = keras_own_order(layer)
    subs = layer._sublayers() if hasattr(layer, "_sublayers") else []
    for sub in subs:
        out += [w for w in _tracked(sub, seen) if all(w is not x for x in out)]
    return out


def keras_order(layer: Any, _seen: set[int] | None = None) -> list[Any]:
    """A layer's weights flattened in Keras' file order (own ``vars``, then sublayers in
    attribute-walk order)."""
    seen = _seen if _seen is not None else set()
    if id(layer) in seen:
        return []
    seen.add(id(layer))
    out = keras_own_order(layer)
    for _, sub in sublayer_tree(layer):
        out += keras_order(sub, seen)
    return out


@dataclass
class Owner:
    """One weight-owning unit of a model: a layer of ``model.layers`` or the model itself."""

    key: str
    layer: Any
    weights: list[Any]            # kiln order
    keras_weights: list[Any]      # Keras order
    class_name: str = ""


def model_layers(model: Any) -> list[Any]:
    """``model.layers`` as Keras lists them: without the model itself and without Keras
    operation nodes (``KerasOperation``, kiln/saving/keras_ops.py), which Keras keeps out of
    ``model.layers`` and out of its weight files."""
    from kiln.saving.keras_ops import KerasOperation

    layers = getattr(model, "layers", None)
    if layers is None:
        return []
    return [layer for layer in layers
            if layer is not model and not isinstance(layer, KerasOperation)]


def weight_owners(model: Any) -> list[Owner]:
    """The model's weight owners: its own weights (if any) then each of ``model.layers``."""
    owners: list[Owner] = []
    own = _own_weights(model)
    if own:
        owners.append(Owner(TOP_LEVEL, model, own, keras_own_order(model),
                            type(model).__name__))
    names: set[str] = set()
    for layer in model_layers(model):
        if layer.name in names:
            raise ValueError(f"{getattr(model, 'name', 'model')}: two layers are named "
                             f"{layer.name!r}; layer names must be unique to save weights")
        names.add(layer.name)
        owners.append(Owner(layer.name, layer, kiln_order(layer), keras_order(layer),
                            type(layer).__name__))
    return owners


def weight_label(owner_key: str, var: Any) -> str:
    """A weight's name relative to its layer (``kernel``, ``lstm_cell/kernel``)."""
    name = getattr(var, "name", "") or "weight"
    if name.startswith(owner_key + "/"):
        name = name[len(owner_key) + 1:]
    return name


def ensure_built(model: Any, build_config: Any, what: str) -> None:
    """Builds an unbuilt model from a stored build config, so its weights exist."""
    if getattr(model, "built", True) and kiln_weights_exist(model):
        return
    if build_config and hasattr(model, "build_from_config"):
        model.build_from_config(build_config)
        return
    if not getattr(model, "built", True):
        raise ValueError(f"{what}: the model {getattr(model, 'name', '')!r} is not built "
                         "(it has no weights yet) and the file has no build config; call "
                         "the model on data or model.build(input_shape) first")


def kiln_weights_exist(model: Any) -> bool:
    try:
        return bool(getattr(model, "weights", [])) or not getattr(model, "layers", None)
    except Exception:  # noqa: BLE001 - an unbuilt model may fail to list weights
        return False


# ---- the file side ----------------------------------------------------------------------------
@dataclass
class FileLayer:
    """The weights of one layer as read from a file."""

    name: str
    names: list[str] = field(default_factory=list)
    arrays: list[Any] = field(default_factory=list)  # Stored (not read yet) or np.ndarray
    class_name: str | None = None


def write_kiln_group(group: Any, model: Any) -> None:
    """Writes kiln's weight layout into an (empty) HDF5 group.

    ``group`` attrs: ``layer_names``; one subgroup per owner with attrs ``class_name`` and
    ``weight_names`` and one dataset per weight (at its name, in its own dtype).
    """
    owners = weight_owners(model)
    set_list_attr(group, "layer_names", [o.key for o in owners])
    for owner in owners:
        g = group.create_group(owner.key)
        g.attrs["class_name"] = owner.class_name
        labels: list[str] = []
        for var in owner.weights:
            label = weight_label(owner.key, var)
            base, n = label, 1
            while label in labels or _clashes(label, labels):
                label = f"{base}_{n}"
                n += 1
            labels.append(label)
            value = np.asarray(var.value if hasattr(var, "value") else var)
            g.create_dataset(label, data=value)
        set_list_attr(g, "weight_names", labels)


def _clashes(label: str, labels: list[str]) -> bool:
    """True if ``label`` would be a group prefix of, or prefixed by, an existing name."""
    return any(x.startswith(label + "/") or label.startswith(x + "/") for x in labels)


def _layer_group(group: Any, name: str) -> Any:
    import h5py

    g = group.get(name) if name else None
    if not isinstance(g, h5py.Group):
        raise FileFormatError(f"the file lists layer {name!r} but has no group for it "
                              "(truncated or edited file?)")
    return g


def read_kiln_group(group: Any) -> list[FileLayer]:
    names = list_attr(group, "layer_names")
    if names is None:
        raise FileFormatError(f"group {group.name!r} has no 'layer_names' attribute: not a "
                              "kiln weight group")
    out = []
    for name in names:
        g = _layer_group(group, name)
        wnames = list_attr(g, "weight_names") or []
        arrays = []
        for w in wnames:
            if w not in g:
                raise FileFormatError(f"layer {name!r}: weight {w!r} is listed but missing "
                                      "from the file")
            arrays.append(stored(g[w], f"layer {name!r}, weight {w!r}"))
        out.append(FileLayer(name, wnames, arrays, attr(g, "class_name")))
    return out


def read_legacy_group(group: Any) -> list[FileLayer]:
    """The legacy Keras layout (``layer_names`` / per-layer ``weight_names``)."""
    names = list_attr(group, "layer_names")
    if names is None:
        raise FileFormatError(f"group {group.name!r} has no 'layer_names' attribute")
    out = []
    for name in names:
        g = _layer_group(group, name)
        wnames = list_attr(g, "weight_names") or []
        arrays = []
        for w in wnames:
            if w not in g:
                raise FileFormatError(f"layer {name!r}: weight {w!r} is listed but missing "
                                      "from the file")
            arrays.append(stored(g[w], f"layer {name!r}, weight {w!r}"))
        out.append(FileLayer(name, wnames, arrays))
    if TOP_LEVEL in group and TOP_LEVEL not in names:
        g = _layer_group(group, TOP_LEVEL)
        wnames = list_attr(g, "weight_names") or []
        if wnames:
            missing = [w for w in wnames if w not in g]
            if missing:
                raise FileFormatError(f"{TOP_LEVEL!r}: weights {missing} are listed but "
                                      "missing from the file")
            out.insert(0, FileLayer(TOP_LEVEL, wnames, [stored(g[w]) for w in wnames]))
    return out


def _numeric_key(name: str) -> tuple[int, Any]:
    return (0, int(name)) if name.isdigit() else (1, name)


def _natural_key(name: str) -> tuple:
    m = re.match(r"^(.*?)(?:_(\d+))?$", name)
    base, num = (m.group(1), int(m.group(2) or 0)) if m else (name, 0)
    return (_name_key(base), num)


def _require_group(obj: Any) -> None:
    import h5py

    if not isinstance(obj, h5py.Group):
        raise FileFormatError(f"{obj.name!r} should be a group, found a {type(obj).__name__}")


def read_keras3_flat(group: Any) -> tuple[list[str], list[Stored]]:
    """All datasets under a Keras 3 object group (not read): its ``vars`` (numeric order),
    then its sub-objects in Keras' attribute-walk order. Walked without recursion, and no
    deeper than :data:`MAX_GROUP_DEPTH` groups."""
    import h5py

    _require_group(group)
    names: list[str] = []
    arrays: list[Stored] = []
    stack = [(group, 0)]
    seen: set[Any] = set()  # object ids: a group hard-linked twice (or into a cycle) once
    while stack:
        g, depth = stack.pop()
        if depth > MAX_GROUP_DEPTH:
            raise FileFormatError(f"group {g.name!r} is nested more than {MAX_GROUP_DEPTH} "
                                  "groups deep; not a Keras weights layout")
        if g.id in seen:
            raise FileFormatError(f"group {g.name!r} is linked more than once under "
                                  f"{group.name!r}; not a Keras weights layout")
        seen.add(g.id)
        if "vars" in g and isinstance(g["vars"], h5py.Group):
            v = g["vars"]
            for key in sorted(v.keys(), key=_numeric_key):
                if isinstance(v[key], h5py.Dataset):
                    names.append(f"{g.name}/vars/{key}")
                    arrays.append(stored(v[key]))
        subs = [g[k] for k in sorted((k for k in g.keys() if k != "vars"), key=_natural_key)]
        # depth first, in order: push the last sub-object first
        stack.extend((sub, depth + 1) for sub in reversed(subs) if isinstance(sub, h5py.Group))
    return names, arrays


def in_walk_order(root: str, layer: Any, names: list, arrays: list) -> tuple[list, list]:
    """``read_keras3_flat``'s datasets in ``layer``'s walk (:func:`sublayer_tree`: a list of
    sublayers in list order, e.g. StackedRNNCells' cells), unchanged if a group is not in it."""
    order: dict[str, int] = {}; stack = [(root, layer)]  # noqa: E702
    while stack:
        path, lay = stack.pop()
        if path not in order:
            order[path] = len(order)
            stack += reversed([(f"{path}/{a}", sub) for a, sub in sublayer_tree(lay)])
    owners = [n.rsplit("/vars/", 1)[0] for n in names]
    if any(o not in order for o in owners):
        return names, arrays
    idx = sorted(range(len(names)), key=lambda i: order[owners[i]])  # stable
    return [names[i] for i in idx], [arrays[i] for i in idx]


def keras3_keys(layers: list[Any]) -> list[str]:
    """Keras 3's container keys for ``layers``: snake_case class name + per-class counter."""
    used: dict[str, int] = {}
    keys = []
    for layer in layers:
        base = keras_snake_case(type(layer).__name__)
        n = used.get(base, -1) + 1
        used[base] = n
        keys.append(base if n == 0 else f"{base}_{n}")
    return keys


def read_keras3_model(h5: Any, model: Any, keys: dict[int, str] | None = None
                      ) -> tuple[list[FileLayer], list[Owner]]:
    """Reads a Keras 3 weights file against ``model``: returns file layers keyed by the
    model's layer names (found through Keras' class-name keys) and the model's owners
    (with the Keras weight order as their ``weights``)."""
    owners = weight_owners(model)
    layers = model_layers(model)
    layer_keys = keys or {id(layer): key for layer, key in zip(layers, keras3_keys(layers))}
    root_layers = h5["layers"] if "layers" in h5 else (
        h5["_layer_checkpoint_dependencies"] if "_layer_checkpoint_dependencies" in h5 else None)
    if root_layers is not None:
        _require_group(root_layers)
    file_layers: list[FileLayer] = []
    plan_owners: list[Owner] = []
    used_keys: set[str] = set()
    for owner in owners:
        plan_owners.append(Owner(owner.key, owner.layer, owner.keras_weights,
                                 owner.keras_weights, owner.class_name))
        if owner.key == TOP_LEVEL:
            if "vars" in h5:
                names, arrays = read_keras3_flat_vars(h5["vars"])
                file_layers.append(FileLayer(TOP_LEVEL, names, arrays))
            continue
        key = layer_keys.get(id(owner.layer))
        if root_layers is None or key is None or key not in root_layers:
            continue
        used_keys.add(key)
        names, arrays = in_walk_order(root_layers[key].name, owner.layer,
                                      *read_keras3_flat(root_layers[key]))
        file_layers.append(FileLayer(owner.key, names, arrays, owner.class_name))
    if root_layers is not None:
        for key in root_layers.keys():
            if key not in used_keys:
                names, arrays = read_keras3_flat(root_layers[key])
                if arrays:
                    file_layers.append(FileLayer(f"layers/{key}", names, arrays))
    return file_layers, plan_owners


def read_keras3_flat_vars(vars_group: Any) -> tuple[list[str], list[Stored]]:
    """The datasets of a ``vars`` group in numeric order (not read)."""
    _require_group(vars_group)
    keys = sorted(vars_group.keys(), key=_numeric_key)
    return ([f"{vars_group.name}/{k}" for k in keys], [stored(vars_group[k]) for k in keys])


def write_keras3_layer(h5: Any, path: str, layer: Any, seen: set[int]) -> None:
    """Writes ``layer`` at ``path`` the way Keras 3 does (``path/vars/0..``, sublayers at
    ``path/<attribute>``)."""
    if id(layer) in seen:
        return
    seen.add(id(layer))
    g = h5.create_group(f"{path}/vars" if path else "vars")
    g.attrs["name"] = str(getattr(layer, "name", ""))
    for i, var in enumerate(keras_own_order(layer)):
        g.create_dataset(str(i), data=np.asarray(var.value))
    for attr_path, sub in sublayer_tree(layer):
        write_keras3_layer(h5, f"{path}/{attr_path}" if path else attr_path, sub, seen)


def write_keras3_model(h5: Any, model: Any, optimizer_arrays: list[np.ndarray] | None = None,
                       optimizer_name: str = "optimizer") -> None:
    """Writes the Keras 3 ``.weights.h5`` layout of ``model`` (and optionally the optimizer
    variables, already in Keras order) into an open, empty HDF5 file."""
    layers = model_layers(model)
    seen: set[int] = {id(model)}
    for layer, key in zip(layers, keras3_keys(layers)):
        write_keras3_layer(h5, f"layers/{key}", layer, seen)
    if optimizer_arrays is not None:
        g = h5.create_group("optimizer/vars")
        g.attrs["name"] = optimizer_name
        for i, a in enumerate(optimizer_arrays):
            g.create_dataset(str(i), data=np.asarray(a))
    g = h5.create_group("vars")
    g.attrs["name"] = str(getattr(model, "name", "model"))
    for i, var in enumerate(keras_own_order(model)):
        g.create_dataset(str(i), data=np.asarray(var.value))


# ---- planning and assigning ---------------------------------------------------------------------
def _fmt_shape(shape: tuple) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def plan(owners: list[Owner], file_layers: list[FileLayer], source: str,
         skip_mismatch: bool = False, by_order: bool = True,
         what: str = "load_weights") -> list[tuple[Any, np.ndarray]]:
    """Matches file layers to the model's owners and checks every count and shape.

    Layers are matched by name; if some model layer is missing by name but the file has the
    same number of weight-carrying layers (of the same classes, when the file records them),
    they are matched in order instead (names differ between processes when generated).

    Returns:
        ``(Variable, array)`` pairs to assign. Raises ValueError (naming the layer and both
        shapes) on the first mismatch unless ``skip_mismatch``, which skips that layer with
        a warning.
    """
    model_w = [o for o in owners if o.weights]
    file_w = [f for f in file_layers if f.arrays]
    by_name = {f.name: f for f in file_layers}
    missing = [o for o in model_w if o.key not in by_name]
    pairs: list[tuple[Owner, FileLayer]] = []
    if not missing:
        pairs = [(o, by_name[o.key]) for o in model_w]
        matched = {o.key for o in model_w}
        extra = [f for f in file_w if f.name not in matched]
    elif by_order and len(model_w) == len(file_w) and all(
            f.class_name in (None, "", o.class_name) for o, f in zip(model_w, file_w)):
        pairs = list(zip(model_w, file_w))
        extra = []
    else:
        have = [f.name for f in file_w]
        if not skip_mismatch:
            o = missing[0]
            raise ValueError(f"{what}: layer {o.key!r} ({o.class_name}, {len(o.weights)} "
                             f"weights) of the model has no weights in {source}; the file "
                             f"has weights for layers {have}")
        for o in missing:
            warnings.warn(f"{what}: skipping layer {o.key!r}: not found in {source}",
                          stacklevel=3)
        pairs = [(o, by_name[o.key]) for o in model_w if o.key in by_name]
        matched = {o.key for o, _ in pairs}
        extra = [f for f in file_w if f.name not in matched]
    if extra:
        names = [f.name for f in extra]
        if not skip_mismatch:
            raise ValueError(f"{what}: {source} has weights for layers {names} that the model "
                             f"does not have (model layers with weights: "
                             f"{[o.key for o in model_w]})")
        warnings.warn(f"{what}: ignoring layers {names} of {source} that the model does "
                      "not have", stacklevel=3)
    out: list[tuple[Any, Any]] = []
    for owner, fl in pairs:
        arrays = fl.arrays
        convert = getattr(owner.layer, "_convert_loaded_weights", None)
        if callable(convert) and owner.layer is not None:
            arrays = list(convert(read_bounded(arrays, owner.weights, f"{source}, layer "
                                               f"{fl.name!r}", what)))
        problem = None
        if len(arrays) != len(owner.weights):
            problem = (f"{what}: layer {owner.key!r} ({owner.class_name}) of the model has "
                       f"{len(owner.weights)} weights "
                       f"{[weight_label(owner.key, w) for w in owner.weights]}, but "
                       f"{source} has {len(arrays)} for layer {fl.name!r} {fl.names}")
        else:
            for i, (var, arr) in enumerate(zip(owner.weights, arrays)):
                if tuple(arr.shape) != tuple(var.shape):
                    where = fl.names[i] if i < len(fl.names) else "?"
                    if not where.startswith("/"):
                        where = f"{fl.name}/{where}"
                    problem = (f"{what}: layer {owner.key!r} ({owner.class_name}), weight "
                               f"{weight_label(owner.key, var)!r}: the model expects shape "
                               f"{_fmt_shape(tuple(var.shape))}, {source} has shape "
                               f"{_fmt_shape(tuple(arr.shape))} (at {where!r})")
                    break
                if arr.dtype.kind not in "biuf":
                    problem = (f"{what}: layer {owner.key!r}, weight "
                               f"{weight_label(owner.key, var)!r}: {source} stores dtype "
                               f"{arr.dtype}, expected a numeric array")
                    break
        if problem:
            if not skip_mismatch:
                raise ValueError(problem)
            warnings.warn(problem + " (skipped)", stacklevel=3)
            continue
        out += list(zip(owner.weights, arrays))
    return read_pairs(out, source, what)


def read_bounded(arrays: list[Any], weights: list[Any], source: str, what: str) -> list[Any]:
    """Reads a layer's datasets for a conversion hook, refusing more than twice the float64
    size of the layer's weights (a conversion may reshape, never needs more)."""
    limit = 2 * 8 * sum(int(np.prod(w.shape, dtype=np.int64)) for w in weights) + (64 << 10)
    declared = sum(a.nbytes for a in arrays if isinstance(a, Stored))
    if declared > limit:
        raise FileFormatError(f"{what}: {source} declares {declared} bytes of weights where "
                              f"the model's layer holds at most {limit}; refused before "
                              "reading")
    return [a.read() if isinstance(a, Stored) else a for a in arrays]


def read_pairs(pairs: list[tuple[Any, Any]], source: str, what: str
               ) -> list[tuple[Any, np.ndarray]]:
    """Reads the planned datasets (their shapes and dtypes already checked) and checks the
    values an integer variable would receive: a float that is not a whole number in the
    variable's range would be cast to a wrong number silently."""
    out = []
    for var, value in pairs:
        arr = value.read() if isinstance(value, Stored) else np.asarray(value)
        check_values(var, arr, source, what)
        out.append((var, arr))
    return out


def check_values(var: Any, arr: np.ndarray, source: str, what: str) -> None:
    """Refuses values that an integer ``var`` cannot hold exactly (NaN, fractions, out of
    range); the message names the variable and the file."""
    target = np.dtype(getattr(var, "dtype", arr.dtype))
    if target.kind not in "iu" or arr.size == 0 or arr.dtype.kind == "b":
        return
    info = np.iinfo(target)
    if arr.dtype.kind == "f":
        ok = bool(np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)))
        ok = ok and float(arr.min()) >= info.min and float(arr.max()) < float(info.max) + 1
    else:
        ok = int(arr.min()) >= info.min and int(arr.max()) <= info.max
    if not ok:
        raise FileFormatError(f"{what}: {source}: the values for {getattr(var, 'name', var)!r} "
                              f"({target}) are not whole numbers in [{info.min}, {info.max}] "
                              f"(stored as {arr.dtype}, min {arr.min()}, max {arr.max()})")


def check_pairs(pairs: list[tuple[Any, np.ndarray]], what: str) -> None:
    """Last check before assigning: shapes (``Variable.assign`` cannot fail after this)."""
    for var, arr in pairs:
        if tuple(np.shape(arr)) != tuple(var.shape):
            raise ValueError(f"{what}: {getattr(var, 'name', var)!r} expects shape "
                             f"{_fmt_shape(tuple(var.shape))}, received "
                             f"{_fmt_shape(tuple(np.shape(arr)))}")


def assign(pairs: list[tuple[Any, np.ndarray]]) -> None:
    """Writes planned values (all checked) into their Variables."""
    for var, arr in pairs:
        var.assign(np.asarray(arr))
