"""``FeatureSpace`` (``keras.utils.FeatureSpace``): one object that preprocesses a dict of
tabular features (numbers, integer and string categories) into one vector per sample, or a
dict of encoded features.

Each feature has a preprocessor (a kiln preprocessing layer: Normalization, Rescaling,
Discretization, IntegerLookup, StringLookup, Hashing, or the identity for plain floats) and an
``output_mode``: ``"float"``, ``"int"`` (the preprocessor's indices) or ``"one_hot"`` (the
indices encoded by ``CategoryEncoding(num_tokens=cardinality, output_mode="multi_hot")``).
Crosses hash the preprocessed indices of several features together into ``crossing_dim``
bins, exactly as Keras' ``HashedCrossing`` (``tf.sparse.cross_hashed``) does. The encoded
features are concatenated in the order of their sorted names, then the sorted crosses.

Where it runs: called on a dict of NumPy arrays (or lists) it computes on the host and returns
NumPy arrays; called on TF tensors (inside ``tf.data.Dataset.map``) it computes with TF ops, as
Keras does. Strings never enter a kiln graph: map the data through the FeatureSpace and train
a model on :meth:`FeatureSpace.get_encoded_features` (Keras' "training model")::

    space.adapt(train_dict)
    encoded = space.get_encoded_features()          # a tensor of the encoded width
    model = kiln.Model(encoded, kiln.layers.Dense(1, "sigmoid")(encoded))
    model.fit(space(train_dict), labels)            # or tf_ds.map(lambda x, y: (space(x), y))
    inference = kiln.Model(space.get_inputs(), model.outputs)   # takes the raw features

The inference model's FeatureSpace runs on the host, on the arrays, before its compiled graph
(``kiln.models.host_prefix``).
"""

from __future__ import annotations

import json
import zipfile
from typing import Any

import numpy as np

from kiln import layers
from kiln.layers.preprocessing._hashes import fingerprint64
from kiln.layers.preprocessing.encoding import encode_numpy
from kiln.layers.preprocessing.tf_data import is_tf_tensor, tf_entry

_M = (1 << 64) - 1
_KMUL = 0xC6A4A7935BD1E995
_HASH_KEY = 0xDECAFCAFFE  # tf.sparse.cross_hashed's default key
_MODULE = "keras.src.layers.preprocessing.feature_space"
_counter: dict[str, int] = {}


def _auto_name(prefix: str) -> str:
    _counter[prefix] = _counter.get(prefix, 0) + 1
    n = _counter[prefix]
    return prefix if n == 1 else f"{prefix}_{n - 1}"


def _fingerprint_cat(a: int, b: int) -> int:
    """TensorFlow's ``FingerprintCat64``."""
    def mix(v: int) -> int:
        return v ^ (v >> 47)
    r = a ^ _KMUL
    r ^= (mix((b * _KMUL) & _M) * _KMUL) & _M
    r = (r * _KMUL) & _M
    r = (mix(r) * _KMUL) & _M
    return mix(r)


def hashed_cross(columns: list[np.ndarray], num_bins: int) -> np.ndarray:
    """Keras' ``HashedCrossing`` on NumPy columns of one value per sample: strings hashed by
    FarmHash ``Fingerprint64``, integers taken as they are, combined with ``FingerprintCat64``
    from TF's key, modulo ``num_bins``; returns int64 ``(batch, 1)``."""
    cols = []
    for c in columns:
        c = np.asarray(c).reshape(len(c), -1)
        if c.shape[1] != 1:
            raise ValueError(f"FeatureSpace: a crossed feature must have one value per sample, "
                             f"received shape {c.shape}")
        if c.dtype.kind in "iub":
            cols.append([int(v) & _M for v in c[:, 0]])
        else:
            cols.append([fingerprint64((v.decode() if isinstance(v, bytes) else str(v))
                                       .encode("utf-8")) for v in c[:, 0]])
    out = []
    for values in zip(*cols):
        h = _HASH_KEY
        for v in values:
            h = _fingerprint_cat(h, v)
        out.append(h % num_bins)
    return np.asarray(out, np.int64).reshape(-1, 1)


class _Float:
    """The preprocessor of ``FeatureSpace.float``: a float32 cast (Keras' ``TFDIdentity``)."""

    def __init__(self, name: str, dtype: str = "float32", **kwargs: Any):
        self.name, self.dtype = name, "float32"

    @tf_entry
    def __call__(self, x: Any) -> Any:
        if is_tf_tensor(x):
            import tensorflow as tf
            return tf.cast(x, "float32")
        return np.asarray(x, np.float32)

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": "float32"}


def _serialize(pre: Any) -> dict:
    if isinstance(pre, _Float):
        return {"module": _MODULE, "class_name": "TFDIdentity", "config": pre.get_config(),
                "registered_name": "TFDIdentity"}
    return layers.serialize(pre)


def _deserialize(config: Any) -> Any:
    if isinstance(config, dict) and config.get("class_name") == "TFDIdentity":
        return _Float(**config.get("config", {}))
    return layers.deserialize(config) if isinstance(config, dict) else config


class Cross:
    """A cross of features: ``crossing_dim`` hash bins of their combined values."""

    def __init__(self, feature_names: Any, crossing_dim: int, output_mode: str = "one_hot"):
        if output_mode not in ("int", "one_hot"):
            raise ValueError(f"FeatureSpace.cross: output_mode must be 'int' or 'one_hot', "
                             f"received output_mode={output_mode!r}")
        self.feature_names = tuple(feature_names)
        self.crossing_dim = int(crossing_dim)
        self.output_mode = output_mode

    @property
    def name(self) -> str:
        return "_X_".join(self.feature_names)

    def get_config(self) -> dict:
        return {"feature_names": list(self.feature_names), "crossing_dim": self.crossing_dim,
                "output_mode": self.output_mode}

    @classmethod
    def from_config(cls, config: dict) -> Cross:
        return cls(**config)


class Feature:
    """A feature: its input dtype, its preprocessor and its ``output_mode``."""

    def __init__(self, dtype: str, preprocessor: Any, output_mode: str):
        if output_mode not in ("int", "one_hot", "float"):
            raise ValueError(f"FeatureSpace.feature: output_mode must be 'int', 'one_hot' or "
                             f"'float', received output_mode={output_mode!r}")
        self.dtype = dtype
        self.preprocessor = _deserialize(preprocessor)
        self.output_mode = output_mode

    def get_config(self) -> dict:
        return {"dtype": self.dtype, "preprocessor": _serialize(self.preprocessor),
                "output_mode": self.output_mode}

    @classmethod
    def from_config(cls, config: dict) -> Feature:
        return cls(**config)


def _wrap(obj: Any) -> dict:
    return {"module": _MODULE, "class_name": type(obj).__name__, "config": obj.get_config(),
            "registered_name": type(obj).__name__}


def _unwrap(config: Any, cls: type) -> Any:
    if isinstance(config, dict) and "class_name" in config:
        return cls.from_config(config["config"])
    return config


class FeatureSpace:
    """Preprocesses a dict of features into one vector per sample (see the module docstring),
    like ``keras.utils.FeatureSpace``.

    Args:
        features: ``{name: feature}``: a :class:`Feature` from the class methods
            (``FeatureSpace.float_normalized()`` ...) or one of their names as a string
            (``"float"``, ``"float_normalized"``, ``"float_rescaled"``, ``"float_discretized"``,
            ``"integer_categorical"``, ``"string_categorical"``, ``"integer_hashed"``,
            ``"string_hashed"``).
        output_mode: ``"concat"`` (one float32 array ``(batch, width)``) or ``"dict"``.
        crosses: :class:`Cross` es (``FeatureSpace.cross(...)``) or tuples of feature names.
        crossing_dim: The bins of the crosses given as tuples.
        hashing_dim: The bins of the features given as ``"..._hashed"``.
        num_discretization_bins: The bins of the features given as ``"float_discretized"``.

    Example:
        >>> space = kiln.utils.FeatureSpace(
        ...     {"age": "float_normalized", "city": "string_categorical"})
        >>> space.adapt({"age": np.array([20., 40.]), "city": np.array(["a", "b"])})
        >>> space({"age": np.array([30.]), "city": np.array(["b"])})
        array([[0., 0., 1., 0.]], dtype=float32)
    """

    # ---- features --------------------------------------------------------------------------
    @classmethod
    def cross(cls, feature_names: Any, crossing_dim: int, output_mode: str = "one_hot") -> Cross:
        return Cross(feature_names, crossing_dim, output_mode=output_mode)

    @classmethod
    def feature(cls, dtype: str, preprocessor: Any, output_mode: str) -> Feature:
        return Feature(dtype, preprocessor, output_mode)

    @classmethod
    def float(cls, name: str | None = None) -> Feature:
        name = name or _auto_name("float")
        return Feature("float32", _Float(f"{name}_preprocessor"), "float")

    @classmethod
    def float_rescaled(cls, scale: float = 1.0, offset: float = 0.0,
                       name: str | None = None) -> Feature:
        name = name or _auto_name("float_rescaled")
        return Feature("float32", layers.Rescaling(scale=scale, offset=offset,
                                                   name=f"{name}_preprocessor"), "float")

    @classmethod
    def float_normalized(cls, name: str | None = None) -> Feature:
        name = name or _auto_name("float_normalized")
        return Feature("float32", layers.Normalization(axis=-1, name=f"{name}_preprocessor"),
                       "float")

    @classmethod
    def float_discretized(cls, num_bins: int, bin_boundaries: Any = None,
                          output_mode: str = "one_hot", name: str | None = None) -> Feature:
        name = name or _auto_name("float_discretized")
        pre = layers.Discretization(num_bins=None if bin_boundaries is not None else num_bins,
                                    bin_boundaries=bin_boundaries, name=f"{name}_preprocessor")
        pre.num_bins = num_bins if bin_boundaries is None else len(bin_boundaries) + 1
        return Feature("float32", pre, output_mode)

    @classmethod
    def integer_categorical(cls, max_tokens: int | None = None, num_oov_indices: int = 1,
                            output_mode: str = "one_hot", name: str | None = None) -> Feature:
        name = name or _auto_name("integer_categorical")
        return Feature("int32", layers.IntegerLookup(
            name=f"{name}_preprocessor", max_tokens=max_tokens,
            num_oov_indices=num_oov_indices), output_mode)

    @classmethod
    def string_categorical(cls, max_tokens: int | None = None, num_oov_indices: int = 1,
                           output_mode: str = "one_hot", name: str | None = None) -> Feature:
        name = name or _auto_name("string_categorical")
        return Feature("string", layers.StringLookup(
            name=f"{name}_preprocessor", max_tokens=max_tokens,
            num_oov_indices=num_oov_indices), output_mode)

    @classmethod
    def string_hashed(cls, num_bins: int, output_mode: str = "one_hot",
                      name: str | None = None) -> Feature:
        name = name or _auto_name("string_hashed")
        return Feature("string", layers.Hashing(name=f"{name}_preprocessor",
                                                num_bins=num_bins), output_mode)

    @classmethod
    def integer_hashed(cls, num_bins: int, output_mode: str = "one_hot",
                       name: str | None = None) -> Feature:
        name = name or _auto_name("integer_hashed")
        return Feature("int32", layers.Hashing(name=f"{name}_preprocessor",
                                               num_bins=num_bins), output_mode)

    # ---- construction ----------------------------------------------------------------------
    def __init__(self, features: dict, output_mode: str = "concat", crosses: Any = None,
                 crossing_dim: int = 32, hashing_dim: int = 32,
                 num_discretization_bins: int = 32, name: str | None = None):
        if not features:
            raise ValueError("FeatureSpace: the features argument cannot be None or empty")
        if output_mode not in ("dict", "concat"):
            raise ValueError(f"FeatureSpace: output_mode must be 'dict' or 'concat', received "
                             f"output_mode={output_mode!r}")
        self.name = name or "feature_space"
        self.crossing_dim, self.hashing_dim = crossing_dim, hashing_dim
        self.num_discretization_bins = num_discretization_bins
        self.output_mode = output_mode
        self.features = {n: self._standardize(n, f) for n, f in features.items()}
        self.crosses: list[Cross] = []
        for c in crosses or []:
            c = _unwrap(c, Cross)
            if not isinstance(c, Cross):
                unknown = [k for k in c if k not in self.features]
                if unknown:
                    raise ValueError(f"FeatureSpace: crosses name features that are not in "
                                     f"features: {unknown} (features: {list(self.features)})")
                c = Cross(c, crossing_dim=crossing_dim)
            self.crosses.append(c)
        self.crosses_by_name = {c.name: c for c in self.crosses}
        self.preprocessors = {n: f.preprocessor for n, f in self.features.items()}
        self._is_adapted = False

    def _standardize(self, name: str, feature: Any) -> Feature:
        feature = _unwrap(feature, Feature)
        if isinstance(feature, Feature):
            return feature
        makers = {
            "float": lambda: self.float(name=name),
            "float_normalized": lambda: self.float_normalized(name=name),
            "float_rescaled": lambda: self.float_rescaled(name=name),
            "float_discretized": lambda: self.float_discretized(
                name=name, num_bins=self.num_discretization_bins),
            "integer_categorical": lambda: self.integer_categorical(name=name),
            "string_categorical": lambda: self.string_categorical(name=name),
            "integer_hashed": lambda: self.integer_hashed(self.hashing_dim, name=name),
            "string_hashed": lambda: self.string_hashed(self.hashing_dim, name=name),
        }
        if feature not in makers:
            raise ValueError(f"FeatureSpace: invalid feature type {feature!r} for feature "
                             f"{name!r}; expected a Feature or one of {sorted(makers)}")
        return makers[feature]()

    # ---- adapt -----------------------------------------------------------------------------
    def _adaptable(self) -> list[str]:
        names = []
        for name, pre in self.preprocessors.items():
            if isinstance(pre, layers.Normalization) and pre.input_mean is not None:
                continue
            if isinstance(pre, layers.TextVectorization) and pre._input_vocabulary:
                continue
            if hasattr(pre, "adapt"):
                names.append(name)
        return names

    def adapt(self, dataset: Any) -> None:
        """Adapts every adaptable preprocessor (Normalization, Discretization, lookups) to its
        feature in ``dataset``: a dict of arrays or lists (its rows are the samples), or a
        ``tf.data.Dataset`` / kiln dataset / iterable of dicts (batched or not), read in the
        batches Keras reads (unbatched samples in batches of 32)."""
        names = self._adaptable()
        if not names:
            self._is_adapted = True
            return
        if isinstance(dataset, dict):
            cols = {k: np.asarray(v) for k, v in dataset.items()}
            n = len(next(iter(cols.values())))
            elements: Any = ({k: v[i] for k, v in cols.items()} for i in range(n))
        elif hasattr(dataset, "__iter__") and not isinstance(dataset, list | tuple | str):
            elements = dataset.as_numpy_iterator() if hasattr(dataset, "as_numpy_iterator") \
                and is_tf_dataset(dataset) else iter(dataset)
        else:
            raise ValueError(f"FeatureSpace.adapt: expected a dict of arrays/lists or a "
                             f"dataset of dicts, received {type(dataset).__name__}")
        batches: dict[str, list] = {k: [] for k in names}
        pending: dict[str, list] = {k: [] for k in names}
        for element in elements:
            if not isinstance(element, dict):
                raise ValueError(f"FeatureSpace.adapt: the dataset must yield dicts of "
                                 f"features, received a {type(element).__name__} (map "
                                 "(x, y) pairs to x first)")
            for k in names:
                if k not in element:
                    raise ValueError(f"FeatureSpace.adapt: the data has no feature {k!r} "
                                     f"(it has {sorted(element)})")
                x = np.asarray(element[k])
                if x.ndim == 0:  # unbatched scalars: batches of 32, as Keras
                    pending[k].append(x)
                    if len(pending[k]) == 32:
                        batches[k].append(np.stack(pending[k])[:, None])
                        pending[k] = []
                else:
                    batches[k].append(x[..., None] if x.ndim == 1 else x)
        for k in names:
            if pending[k]:
                batches[k].append(np.stack(pending[k])[:, None])
            self.preprocessors[k].adapt(batches[k])
        self._is_adapted = True

    def _check_adapted(self) -> None:
        if not self._is_adapted:
            if self._adaptable():
                raise ValueError("FeatureSpace: call .adapt(dataset) on the FeatureSpace "
                                 "before using it")
            self._is_adapted = True

    # ---- encoding --------------------------------------------------------------------------
    def _cardinality(self, name: str, pre: Any) -> int:
        if isinstance(pre, layers.IntegerLookup | layers.StringLookup):
            return pre.vocabulary_size()
        if isinstance(pre, layers.CategoryEncoding):
            return pre.num_tokens
        if isinstance(pre, layers.Discretization):
            return int(pre.num_bins if pre.num_bins is not None
                       else len(pre.bin_boundaries) + 1)
        if isinstance(pre, layers.Hashing):
            return pre.num_bins
        if isinstance(pre, Cross):
            return pre.crossing_dim
        raise ValueError(f"FeatureSpace: feature {name!r} has output_mode='one_hot', but the "
                         "size of its preprocessor's output space is not known, so it cannot "
                         "be one-hot encoded; use output_mode='int'")

    @tf_entry
    def __call__(self, data: dict) -> Any:
        """The encoded features of ``data`` (a dict of arrays, lists, scalars or TF tensors):
        a float32 array ``(batch, width)`` (``"concat"``) or a dict (``"dict"``)."""
        if not isinstance(data, dict):
            raise ValueError(f"FeatureSpace: call it with a dict of features, received "
                             f"{type(data).__name__}")
        self._check_adapted()
        missing = [k for k in self.features if k not in data]
        if missing:
            raise ValueError(f"FeatureSpace: the data lacks the features {missing} (it has "
                             f"{sorted(data)})")
        use_tf = any(is_tf_tensor(v) for v in data.values())
        ops = _TFOps() if use_tf else _NumpyOps()
        xs, rebatched = {}, False
        for k in self.features:
            x = ops.convert(data[k])
            if len(x.shape) == 0:
                x, rebatched = ops.reshape(x, (1, 1)), True
            elif len(x.shape) == 1:
                x = ops.expand(x)
            xs[k] = x
        pre = {k: ops.convert(self.preprocessors[k](xs[k])) for k in self.features}
        crossed = {c.name: ops.cross([pre[n] for n in c.feature_names], c.crossing_dim)
                   for c in self.crosses}
        out = {}
        for name in sorted(pre) + sorted(crossed):
            spec = self.features.get(name) or self.crosses_by_name[name]
            x = pre[name] if name in pre else crossed[name]
            if spec.output_mode == "one_hot":
                if not ops.is_int(x):
                    raise ValueError(f"FeatureSpace: feature {name!r} has output_mode="
                                     "'one_hot', so its preprocessor must return integers; it "
                                     f"returns {ops.dtype(x)}")
                source = self.preprocessors.get(name) or self.crosses_by_name[name]
                x = ops.multi_hot(x, self._cardinality(name, source))
            if self.output_mode == "concat" and (ops.is_int(x) or ops.dtype(x) == "string"):
                raise ValueError(f"FeatureSpace: cannot concatenate features because feature "
                                 f"{name!r} is not encoded (it has dtype {ops.dtype(x)}); use "
                                 "output_mode='dict'")
            out[name] = x
        if self.output_mode == "concat":
            merged = ops.concat(list(out.values()))
            return merged[0] if rebatched else merged
        if rebatched:
            out = {k: v[0] if len(v.shape) == 2 and v.shape[0] == 1 else v
                   for k, v in out.items()}
        return out

    def get_inputs(self) -> dict:
        """kiln ``Input`` s ``(batch, 1)`` of the raw features, by name (Keras'
        ``get_inputs``; the same ones at every call). A string feature's input is a host-side
        string input (``kiln.layers.host_tensor``): a model built on these inputs runs the
        FeatureSpace on the host before its compiled graph."""
        from kiln.layers import Input
        if getattr(self, "_inputs", None) is None:
            self._inputs = {k: Input((1,), dtype=f.dtype, name=k)
                            for k, f in self.features.items()}
        return self._inputs

    def get_encoded_features(self) -> Any:
        """The encoded features of :meth:`get_inputs` (one tensor of the concatenated width,
        or a dict of them named by feature), as Keras: the output of this FeatureSpace
        called on its inputs, a host-side step. Train a model that starts at these tensors on
        the mapped data, and build the inference model from :meth:`get_inputs` to the same
        outputs (see the module docstring)."""
        self._check_adapted()
        if getattr(self, "_encoded", None) is None:
            from kiln.utils.feature_space_layer import FeatureSpaceLayer
            self._encoded = FeatureSpaceLayer(self)(self.get_inputs())
        return self._encoded

    # ---- config and files ------------------------------------------------------------------
    def get_config(self) -> dict:
        return {"name": self.name,
                "features": {k: _wrap(f) for k, f in self.features.items()},
                "output_mode": self.output_mode,
                "crosses": [_wrap(c) for c in self.crosses],
                "crossing_dim": self.crossing_dim, "hashing_dim": self.hashing_dim,
                "num_discretization_bins": self.num_discretization_bins}

    @classmethod
    def from_config(cls, config: dict) -> FeatureSpace:
        return cls(**config)

    def save(self, filepath: str) -> None:
        """Writes the FeatureSpace (configuration, vocabularies, bin boundaries and the
        adapted normalization statistics) to a ``.keras`` zip file; read it with
        :meth:`FeatureSpace.load`."""
        if not str(filepath).endswith(".keras"):
            raise ValueError(f"FeatureSpace.save: the file name must end in .keras, received "
                             f"{filepath!r}")
        state = {}
        for k, pre in self.preprocessors.items():
            if isinstance(pre, layers.Normalization) and pre.input_mean is None and pre.built:
                state[k] = [np.asarray(w).tolist() for w in pre.get_weights()]
        body = {"module": "keras.utils", "class_name": "FeatureSpace",
                "config": self.get_config(), "registered_name": None,
                "kiln_state": {"adapted": self._is_adapted, "normalization": state}}
        with zipfile.ZipFile(filepath, "w") as zf:
            zf.writestr("config.json", json.dumps(body))
            zf.writestr("metadata.json", json.dumps({"keras_version": "3.15.0",
                                                     "saved_by": "kiln"}))

    @classmethod
    def load(cls, filepath: str) -> FeatureSpace:
        """The FeatureSpace :meth:`save` wrote."""
        with zipfile.ZipFile(filepath) as zf:
            body = json.loads(zf.read("config.json"))
        if body.get("class_name") != "FeatureSpace":
            raise ValueError(f"FeatureSpace.load: {filepath!r} holds a "
                             f"{body.get('class_name')!r}, not a FeatureSpace")
        space = cls.from_config(body["config"])
        state = body.get("kiln_state", {})
        for k, weights in state.get("normalization", {}).items():
            pre = space.preprocessors[k]
            pre.build((None, np.asarray(weights[0]).shape[-1] if np.ndim(weights[0]) else 1))
            pre.set_weights([np.asarray(w) for w in weights])
        space._is_adapted = bool(state.get("adapted", True))
        return space


def is_tf_dataset(x: Any) -> bool:
    return type(x).__module__.startswith("tensorflow") and hasattr(x, "element_spec")


class _NumpyOps:
    def convert(self, x: Any) -> np.ndarray:
        return np.asarray(x)

    def reshape(self, x: Any, shape: tuple) -> Any:
        return x.reshape(shape)

    def expand(self, x: Any) -> Any:
        return x[:, None]

    def is_int(self, x: Any) -> bool:
        return x.dtype.kind in "iu"

    def dtype(self, x: Any) -> str:
        return "string" if x.dtype.kind in "OUS" else str(x.dtype)

    def cross(self, cols: list, dim: int) -> Any:
        return hashed_cross(cols, dim)

    def multi_hot(self, x: Any, depth: int) -> Any:
        return encode_numpy(x, "multi_hot", depth, "float32")

    def concat(self, xs: list) -> Any:
        return np.concatenate([np.asarray(x, np.float32) for x in xs], axis=-1)


class _TFOps:
    def __init__(self) -> None:
        import tensorflow as tf
        self.tf = tf

    def convert(self, x: Any) -> Any:
        return x if is_tf_tensor(x) else self.tf.convert_to_tensor(np.asarray(x))

    def reshape(self, x: Any, shape: tuple) -> Any:
        return self.tf.reshape(x, shape)

    def expand(self, x: Any) -> Any:
        return self.tf.expand_dims(x, -1)

    def is_int(self, x: Any) -> bool:
        return x.dtype.is_integer

    def dtype(self, x: Any) -> str:
        return "string" if x.dtype == self.tf.string else x.dtype.name

    def cross(self, cols: list, dim: int) -> Any:
        tf = self.tf
        cols = [c if c.dtype == tf.string else tf.cast(c, "int64") for c in cols]
        return tf.sparse.to_dense(tf.sparse.cross_hashed(cols, dim))

    def multi_hot(self, x: Any, depth: int) -> Any:
        tf = self.tf
        return tf.reduce_max(tf.one_hot(tf.cast(x, "int64"), depth, dtype="float32"), axis=1)

    def concat(self, xs: list) -> Any:
        return self.tf.concat([self.tf.cast(x, "float32") for x in xs], axis=-1)


__all__ = ["FeatureSpace", "Feature", "Cross", "hashed_cross"]

