"""The preprocessing layers inside ``tf.data`` (Keras 3's ``TFDataLayer``): called on a
TensorFlow tensor (eager, or symbolic inside ``tf.data.Dataset.map`` / ``tf.function``), a
preprocessing layer computes with TensorFlow ops, as Keras 3 runs its preprocessing layers on
the TensorFlow backend inside ``tf.data`` whatever the backend.

TensorFlow is never imported here unless the input already is a TF tensor
(:func:`is_tf_tensor`). The layers with a TF implementation below
compute with TF ops from the layer's own state (scale, mean and variance, bin boundaries,
vocabulary ...; the random layers draw with ``tf.random`` and apply kiln's transform rows
with ``ImageProjectiveTransformV3``); the others (lookups with several OOV buckets or
``invert``, ``Resizing(pad_to_aspect_ratio=True)``, layers without a TF implementation) run
kiln's NumPy path through ``tf.numpy_function``, which works in ``tf.data`` pipelines but not
in a saved TF graph.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

EPSILON = 1e-7  # Normalization's floor on the standard deviation (as the graph path)


def is_tf_tensor(x: Any) -> bool:
    """Whether ``x`` is a TensorFlow tensor (dense, ragged or sparse; eager or symbolic).
    Never imports TensorFlow: a TF tensor exists only once TensorFlow is imported."""
    tf = sys.modules.get("tensorflow")
    if tf is None or not type(x).__module__.startswith("tensorflow"):
        return False
    return isinstance(x, tf.Tensor | tf.RaggedTensor | tf.SparseTensor)


def tf_entry(fn: Callable) -> Callable:
    """Marks ``fn`` as AutoGraph's own artifact (what ``tf.autograph.experimental.
    do_not_convert`` sets), so that ``tf.data.Dataset.map`` calls it as it is instead of
    trying to convert kiln's Python (it computes with TF ops already)."""
    fn.autograph_info__ = frozenset()  # type: ignore[attr-defined]
    return fn


class TFDataLayer:
    """Mixin of the preprocessing layers: a TF tensor input is computed with TF ops."""

    @tf_entry
    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if is_tf_tensor(inputs):
            return tf_call(self, inputs, *args, **kwargs)
        return super().__call__(inputs, *args, **kwargs)  # type: ignore[misc]


@tf_entry
def tf_call(layer: Any, x: Any, *args: Any, training: bool | None = None, **kwargs: Any) -> Any:
    """``layer`` on the TF tensor ``x`` (see the module docstring)."""
    import tensorflow as tf
    extra = dict(kwargs)
    weights = extra.pop("count_weights", args[0] if args else None)
    if extra or len(args) > 1 or (weights is not None and type(layer).__name__
                                  != "CategoryEncoding"):
        raise TypeError(f"Layer '{layer.name}' ({type(layer).__name__}) on a TensorFlow tensor "
                        f"takes no arguments but the inputs and training, received "
                        f"{len(args)} positional and {sorted(kwargs)}")
    if weights is not None:
        return _category_encoding(tf, layer, x, training, weights)
    for cls in type(layer).__mro__:
        impl = _IMPLS.get(cls.__name__)
        if impl is not None:
            out = impl(tf, layer, x, training)
            if out is not NotImplemented:
                return out
            break
    return _numpy_fallback(tf, layer, x, training)


def _numpy_fallback(tf: Any, layer: Any, x: Any, training: bool | None) -> Any:
    """kiln's own (NumPy) computation of ``layer`` inside the TF graph."""
    kwargs = {} if training is None else {"training": training}
    probe = layer(np.zeros([d or 1 for d in x.shape], x.dtype.as_numpy_dtype)
                  if x.dtype != tf.string else np.full([d or 1 for d in x.shape], "", object),
                  **kwargs)
    out_dtype = tf.string if np.asarray(probe).dtype.kind in "OUS" else tf.as_dtype(
        np.asarray(probe).dtype)

    def run(a: np.ndarray) -> np.ndarray:
        if a.dtype == object:
            a = a.astype(str)
        r = np.asarray(layer(a, **kwargs))
        return r.astype(bytes) if r.dtype.kind in "OU" else r
    out = tf.numpy_function(run, [x], out_dtype, stateful=True)
    same_rank = np.ndim(probe) == len(x.shape)
    if same_rank:
        out.set_shape([d if p == (d or 1) else p for d, p in zip(x.shape, np.shape(probe))])
    return out


def _float(tf: Any, layer: Any, x: Any) -> Any:
    return tf.cast(x, layer.dtype) if x.dtype != tf.as_dtype(layer.dtype) else x


def _rescaling(tf: Any, layer: Any, x: Any, training: Any) -> Any:
    x = _float(tf, layer, x)
    scale = tf.constant(np.asarray(layer.scale, layer.dtype))
    offset = tf.constant(np.asarray(layer.offset, layer.dtype))
    return x * scale + offset


def _normalization(tf: Any, layer: Any, x: Any, training: Any) -> Any:
    if not layer.built:
        layer.build(tuple(x.shape))
    x = _float(tf, layer, x)
    if layer.input_mean is not None:
        mean, var = layer._given(layer.input_mean), layer._given(layer.input_variance)
    else:
        mean = np.reshape(layer.adapt_mean.numpy(), layer._bshape)
        var = np.reshape(layer.adapt_variance.numpy(), layer._bshape)
    mean = tf.constant(np.asarray(mean, layer.dtype))
    std = tf.constant(np.maximum(np.sqrt(np.asarray(var, layer.dtype)), EPSILON)
                      .astype(layer.dtype))
    return mean + x * std if layer.invert else (x - mean) / std


def _encode(tf: Any, idx: Any, mode: str, depth: int, dtype: str,
            weights: Any = None) -> Any:
    """``encoding.encode`` with TF ops (Keras' ``encode_categorical_inputs``)."""
    if mode == "int":
        return tf.cast(idx, dtype)
    idx = tf.cast(idx, "int64")
    if idx.shape.rank == 0:
        idx = tf.reshape(idx, (1,))
    if mode == "one_hot":
        if idx.shape.rank > 1 and idx.shape[-1] == 1:
            idx = tf.squeeze(idx, -1)
        return tf.one_hot(idx, depth, dtype=dtype)
    if idx.shape.rank is not None and idx.shape.rank <= 2:  # one bincount, as Keras
        valid = tf.logical_and(idx >= 0, idx < depth)
        w = tf.cast(valid, "float32")
        if weights is not None and mode == "count":
            w = w * tf.cast(weights, "float32")
        counts = tf.math.bincount(tf.where(valid, idx, 0), weights=w,
                                  minlength=depth, maxlength=depth, axis=-1)
        return tf.cast(counts > 0 if mode == "multi_hot" else counts, dtype)
    hot = tf.one_hot(idx, depth, dtype=dtype)
    axis = 1 if idx.shape.rank > 1 else 0
    if mode == "multi_hot":
        return tf.reduce_max(hot, axis=axis)
    if weights is not None:
        hot = hot * tf.cast(weights, dtype)[..., None]
    return tf.reduce_sum(hot, axis=axis)


def _category_encoding(tf: Any, layer: Any, x: Any, training: Any,
                       count_weights: Any = None) -> Any:
    if count_weights is not None and layer.output_mode != "count":
        raise ValueError(f"Layer '{layer.name}' (CategoryEncoding): count_weights is only "
                         f"used with output_mode='count', not {layer.output_mode!r}")
    return _encode(tf, x, layer.output_mode, layer.num_tokens, layer.dtype, count_weights)


def _discretization(tf: Any, layer: Any, x: Any, training: Any) -> Any:
    if layer.bin_boundaries is None:
        raise ValueError(f"Layer '{layer.name}' (Discretization): pass bin_boundaries or "
                         "call adapt() before using the layer")
    if x.dtype not in (tf.float32, tf.float64):
        x = tf.cast(x, "float32")
    idx = tf.raw_ops.Bucketize(input=x, boundaries=[float(b) for b in layer.bin_boundaries])
    dtype = "int32" if layer.output_mode == "int" else layer.dtype
    return _encode(tf, idx, layer.output_mode, len(layer.bin_boundaries) + 1, dtype)


def _images(tf: Any, layer: Any, x: Any) -> tuple[Any, bool]:
    if x.shape.rank not in (3, 4):
        raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}) expects images of "
                         "rank 4 (batch, height, width, channels) or 3 (height, width, "
                         f"channels), received shape {tuple(x.shape)}")
    x = _float(tf, layer, x)
    if layer.data_format == "channels_first":
        x = tf.transpose(x, (0, 2, 3, 1) if x.shape.rank == 4 else (1, 2, 0))
    return (x[None], True) if x.shape.rank == 3 else (x, False)


def _images_out(tf: Any, layer: Any, x: Any, added: bool) -> Any:
    if layer.data_format == "channels_first":
        x = tf.transpose(x, (0, 3, 1, 2))
    return x[0] if added else x


def _smart_crop(tf: Any, x: Any, th: int, tw: int) -> Any:
    """Keras' ``smart_resize`` crop: the largest centred window of ``th:tw`` aspect."""
    shape = tf.shape(x)
    h, w = tf.cast(shape[1], "float32"), tf.cast(shape[2], "float32")
    ch = tf.minimum(h, tf.floor(w * th / tw))
    cw = tf.minimum(w, tf.floor(h * tw / th))
    top = tf.cast(tf.floor((h - ch) / 2), "int32")
    left = tf.cast(tf.floor((w - cw) / 2), "int32")
    return x[:, top:top + tf.cast(ch, "int32"), left:left + tf.cast(cw, "int32"), :]


def _resizing(tf: Any, layer: Any, x: Any, training: Any) -> Any:
    if layer.pad_to_aspect_ratio:
        return NotImplemented
    x, added = _images(tf, layer, x)
    th, tw = layer.height, layer.width
    if layer.crop_to_aspect_ratio:
        x = _smart_crop(tf, x, th, tw)
    x = tf.image.resize(x, (th, tw), method=layer.interpolation, antialias=layer.antialias)
    return _images_out(tf, layer, tf.cast(x, layer.dtype), added)


def _center_crop(tf: Any, layer: Any, x: Any, training: Any) -> Any:
    x, added = _images(tf, layer, x)
    th, tw = layer.height, layer.width
    shape = tf.shape(x)
    h, w = shape[1], shape[2]

    def crop() -> Any:
        top, left = (h - th) // 2, (w - tw) // 2
        return x[:, top:top + th, left:left + tw, :]

    def resize() -> Any:
        return tf.image.resize(_smart_crop(tf, x, th, tw), (th, tw), method="bilinear")
    out = tf.cond(tf.logical_and(h >= th, w >= tw), crop, resize)
    out = tf.ensure_shape(out, [x.shape[0], th, tw, x.shape[-1]])
    return _images_out(tf, layer, out, added)


def _seed(layer: Any, k: int = 0) -> int | None:
    """The op seed of a random layer's ``k``-th draw (None: TF's own randomness)."""
    return None if layer.seed is None else int(layer.seed) * 2 + k


def _random_flip(tf: Any, layer: Any, x: Any, training: Any) -> Any:
    if training is False:
        return _float(tf, layer, x)
    x, added = _images(tf, layer, x)
    n = tf.shape(x)[0]
    flip = tf.random.uniform((n, 1, 1, 1), seed=_seed(layer)) < 0.5  # one draw, as Keras
    if layer.mode in ("horizontal", "horizontal_and_vertical"):
        x = tf.where(flip, tf.reverse(x, [2]), x)
    if layer.mode in ("vertical", "horizontal_and_vertical"):
        x = tf.where(flip, tf.reverse(x, [1]), x)
    return _images_out(tf, layer, x, added)


def _random_brightness(tf: Any, layer: Any, x: Any, training: Any) -> Any:
    if training is False:
        return _float(tf, layer, x)
    x, added = _images(tf, layer, x)
    lo, hi = layer.value_range
    fl, fu = layer.factor
    delta = tf.random.uniform((tf.shape(x)[0], 1, 1, 1), fl, fu, seed=_seed(layer)) * (hi - lo)
    x = tf.clip_by_value(x + tf.cast(delta, x.dtype), lo, hi)
    return _images_out(tf, layer, x, added)


def _random_contrast(tf: Any, layer: Any, x: Any, training: Any) -> Any:
    if training is False:
        return _float(tf, layer, x)
    x, added = _images(tf, layer, x)
    lower, upper = layer.factor
    f = tf.random.uniform((tf.shape(x)[0], 1, 1, 1), 1.0 - lower, 1.0 + upper, x.dtype,
                          seed=_seed(layer))
    mean = tf.reduce_mean(x, axis=(1, 2), keepdims=True)
    x = tf.clip_by_value((x - mean) * f + mean, *layer.value_range)
    return _images_out(tf, layer, x, added)


def _random_crop(tf: Any, layer: Any, x: Any, training: Any) -> Any:
    x, added = _images(tf, layer, x)
    th, tw = layer.height, layer.width
    shape = tf.shape(x)
    h, w = shape[1], shape[2]

    def crop() -> Any:  # one offset per batch, as kiln's graph path and Keras
        top = tf.random.uniform((), 0, h - th + 1, tf.int32, seed=_seed(layer))
        left = tf.random.uniform((), 0, w - tw + 1, tf.int32, seed=_seed(layer, 1))
        return x[:, top:top + th, left:left + tw, :]

    def resize() -> Any:
        return tf.image.resize(_smart_crop(tf, x, th, tw), (th, tw), method="bilinear")
    if training is False:
        out = resize()
    else:
        out = tf.cond(tf.logical_and(h > th, w > tw), crop, resize)
    out = tf.ensure_shape(out, [x.shape[0], th, tw, x.shape[-1]])
    return _images_out(tf, layer, out, added)


def _geometric(tf: Any, layer: Any, x: Any, training: Any) -> Any:
    """RandomRotation / RandomZoom / RandomTranslation: the transform rows of kiln's graph
    path (Keras' conventions), applied by TF's ``ImageProjectiveTransformV3``."""
    if training is False:
        return _float(tf, layer, x)
    x, added = _images(tf, layer, x)
    shape = tf.shape(x)
    n = shape[0]
    h, w = tf.cast(shape[1], "float32"), tf.cast(shape[2], "float32")
    zero, one = tf.zeros((n, 1)), tf.ones((n, 1))

    draws = iter(range(2))

    def uniform(lo: float, hi: float) -> Any:
        seed = _seed(layer, next(draws))
        return tf.random.uniform((n, 1), lo, hi, seed=seed) if hi > lo else \
            tf.fill((n, 1), float(lo))
    kind = type(layer).__name__
    if kind == "RandomRotation":
        lo, hi = layer.factor
        rad = uniform(lo * 360.0, hi * 360.0) * (np.pi / 180.0)
        cos, sin = tf.cos(rad), tf.sin(rad)
        cx, cy = 0.5 * (w - 1), 0.5 * (h - 1)
        rows = [cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy]
    elif kind == "RandomZoom":
        hl, hu = layer.height_factor
        zh = uniform(1.0 + hl, 1.0 + hu)
        zw = zh if layer.width_factor is None else uniform(1.0 + layer.width_factor[0],
                                                           1.0 + layer.width_factor[1])
        rows = [zw, zero, (1.0 - zw) * (w - 1) / 2.0, zero, zh, (1.0 - zh) * (h - 1) / 2.0]
    else:
        (hl, hu), (wl, wu) = layer.height_factor, layer.width_factor
        dy, dx = uniform(hl, hu) * h, uniform(wl, wu) * w
        rows = [one, zero, -dx, zero, one, -dy]
    transforms = tf.concat(rows + [zero, zero], axis=1)
    out = tf.raw_ops.ImageProjectiveTransformV3(
        images=x, transforms=transforms, output_shape=shape[1:3],
        fill_value=tf.constant(layer.fill_value, x.dtype),
        interpolation=layer.interpolation.upper(), fill_mode=layer.fill_mode.upper())
    out.set_shape(x.shape)
    return _images_out(tf, layer, out, added)


def _hash_strings(tf: Any, layer: Any, s: Any, bins: int) -> Any:
    if layer.salt is None:
        return tf.strings.to_hash_bucket_fast(s, bins)
    return tf.strings.to_hash_bucket_strong(s, bins, list(layer.salt))


def _hashing(tf: Any, layer: Any, x: Any, training: Any) -> Any:
    values = x
    if layer.output_mode == "one_hot" and x.shape.rank and x.shape[-1] == 1:
        values = tf.squeeze(values, -1)
    strings = values if values.dtype == tf.string else tf.strings.as_string(values)
    bins = layer.num_bins
    if layer.mask_value is not None and bins > 1:
        mask = tf.equal(strings, str(layer.mask_value))
        out = tf.where(mask, tf.zeros_like(values, "int64"),
                       _hash_strings(tf, layer, strings, bins - 1) + 1)
    else:
        out = _hash_strings(tf, layer, strings, bins)
    mode = "int" if layer.output_mode == "one_hot" and out.shape.rank == 0 else \
        layer.output_mode
    return _encode(tf, out, mode, layer.num_bins, layer.dtype) if mode != "int" else \
        tf.cast(out, layer.dtype)


def _lookup(tf: Any, layer: Any, x: Any, training: Any) -> Any:
    if layer.invert or layer.num_oov_indices > 1:
        return NotImplemented
    layer._check_ready()
    tokens = [] if layer._tokens is None else layer._tokens.tolist()
    if layer._strings:
        keys = tf.constant([str(t) for t in tokens] or [""], tf.string)
        x = x if x.dtype == tf.string else tf.strings.as_string(x)
    else:
        keys = tf.constant([int(t) for t in tokens] or [0], tf.int64)
        x = tf.cast(x, "int64")
    values = tf.range(layer._token_start, layer._token_start + len(tokens), dtype=tf.int64) \
        if tokens else tf.constant([-1], tf.int64)
    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), -1)
    idx = table.lookup(x)
    oov = idx < 0
    if layer.mask_token is not None:
        is_mask = tf.equal(x, tf.constant(layer.mask_token, x.dtype))
        oov = tf.logical_and(oov, tf.logical_not(is_mask))
    if layer.num_oov_indices == 0:
        tf.debugging.assert_equal(tf.reduce_any(oov), False, message=(
            f"Layer '{layer.name}' ({type(layer).__name__}): with num_oov_indices=0 every "
            "input must be in the vocabulary"))
    else:
        idx = tf.where(oov, tf.constant(layer._oov_start, tf.int64), idx)
    if layer.mask_token is not None:
        idx = tf.where(is_mask, tf.constant(0 if layer.output_mode == "int" else -1, tf.int64),
                       idx)
    if layer.output_mode == "int":
        return idx
    if layer.output_mode == "tf_idf":
        counts = _encode(tf, idx, "count", layer._depth(), layer.dtype)
        return counts * tf.constant(layer._idf_vector().astype(layer.dtype))
    return _encode(tf, idx, layer.output_mode, layer._depth(), layer.dtype)


@tf_entry
def text_vectorization(layer: Any, x: Any) -> Any:
    """``TextVectorization`` with TF ops: Keras' own steps (standardize, split, n-grams),
    then the lookup (its ragged tokens padded with the mask ``""``)."""
    import tensorflow as tf

    from kiln.layers.preprocessing.text_vectorization import PUNCTUATION
    if x.dtype != tf.string:
        x = tf.strings.as_string(x)
    std = layer.standardize
    if std in ("lower", "lower_and_strip_punctuation"):
        x = tf.strings.lower(x)
    if std in ("strip_punctuation", "lower_and_strip_punctuation"):
        x = tf.strings.regex_replace(x, PUNCTUATION, "")
    if callable(std):
        x = std(x)
    if layer.split is not None:
        if x.shape.rank > 1:
            if x.shape[-1] != 1:
                raise ValueError(
                    f"Layer '{layer.name}' (TextVectorization): to split strings the input "
                    f"rank must be 1 or the last dimension must be 1, received shape "
                    f"{tuple(x.shape)}")
            x = tf.squeeze(x, -1)
        if layer.split == "whitespace":
            x = tf.strings.split(x)
        elif layer.split == "character":
            x = tf.strings.unicode_split(x, "UTF-8")
        else:
            x = layer.split(x)
    if layer._widths is not None:
        x = tf.strings.ngrams(x, ngram_width=layer._widths, separator=" ")
    if isinstance(x, tf.RaggedTensor):
        width = layer.output_sequence_length if layer.output_mode == "int" else None
        shape = None if width is None else x.shape.as_list()[:-1] + [width]
        x = x.to_tensor(default_value="", shape=shape)
    elif layer.output_mode == "int" and layer.output_sequence_length is not None:
        n = layer.output_sequence_length
        x = x[..., :n]
        pad = n - tf.shape(x)[-1]
        x = tf.pad(x, [[0, 0]] * (x.shape.rank - 1) + [[0, pad]], constant_values="")
    elif layer.output_mode != "int" and x.shape.rank == 1:
        x = x[:, None]
    return tf_call(layer._lookup, x)


_IMPLS: dict[str, Callable[..., Any]] = {
    "Rescaling": _rescaling, "Normalization": _normalization,
    "Discretization": _discretization, "CategoryEncoding": _category_encoding,
    "Resizing": _resizing, "CenterCrop": _center_crop, "RandomFlip": _random_flip,
    "RandomBrightness": _random_brightness, "RandomContrast": _random_contrast,
    "RandomCrop": _random_crop, "RandomRotation": _geometric, "RandomZoom": _geometric,
    "RandomTranslation": _geometric,
    "Hashing": _hashing, "StringLookup": _lookup, "IntegerLookup": _lookup,
}

__all__ = ["TFDataLayer", "tf_call", "is_tf_tensor", "tf_entry"]
