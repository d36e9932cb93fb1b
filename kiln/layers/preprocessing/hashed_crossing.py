"""HashedCrossing: crosses of categorical features by the hashing trick, on the host.

TensorFlow's ``sparse.cross_hashed`` (what Keras' layer runs): a string feature hashes to its
FarmHash ``Fingerprint64``, an integer feature is its own 64-bit value; the crossed value is
``FingerprintCat64`` folded over the features from the key ``0xDECAFCAFFE``, modulo
``num_bins``. The results equal Keras'. A data-preparation layer like ``Hashing``: NumPy
arrays in, NumPy arrays out (TF tensors inside ``tf.data`` are crossed with TF's own op).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.layers.base import Layer, is_symbolic
from kiln.layers.preprocessing._base import check_choice
from kiln.layers.preprocessing._hashes import as_strings, fingerprint64
from kiln.layers.preprocessing.encoding import encode_numpy
from kiln.layers.preprocessing.hashing import host_only
from kiln.layers.preprocessing.tf_data import is_tf_tensor, tf_entry

_M = (1 << 64) - 1
_KMUL = 0xC6A4A7935BD1E995
HASH_KEY = 0xDECAFCAFFE  # tf.sparse.cross_hashed's default key


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def fingerprint_cat64(fp1: int, fp2: int) -> int:
    """TensorFlow's ``FingerprintCat64``: two 64-bit fingerprints combined, order-dependent."""
    result = fp1 ^ _KMUL
    result ^= (_shift_mix((fp2 * _KMUL) & _M) * _KMUL) & _M
    result = (result * _KMUL) & _M
    result = (_shift_mix(result) * _KMUL) & _M
    return _shift_mix(result)


def _feature_hashes(values: np.ndarray) -> list[int]:
    if values.dtype.kind in "iu":
        return [int(v) & _M for v in values.astype(np.int64)]
    if values.dtype.kind in "USO":
        return [fingerprint64(s.encode("utf-8")) for s in as_strings(values)]
    raise ValueError(f"HashedCrossing: all inputs should have an integer or string dtype, "
                     f"received dtype {values.dtype}")


class HashedCrossing(Layer):
    """Crosses scalar categorical features into ``num_bins`` bins (Keras' ``HashedCrossing``):
    ``hash(concatenate(features)) % num_bins``, TensorFlow's ``sparse.cross_hashed``.

    A data-preparation layer: call it on a list or tuple of at least two NumPy arrays (integers
    or strings) of equal shape ``()``, ``(batch,)`` or ``(batch, 1)``; it returns NumPy arrays.

    Args:
        num_bins: the number of hash bins.
        output_mode: ``"int"`` (default, int64 bin indices) or ``"one_hot"`` (float32,
            depth ``num_bins``).
        sparse: must be False.

    Example:
        >>> kiln.layers.HashedCrossing(num_bins=5)((np.array(["A", "B", "A", "B", "A"]),
        ...                                         np.array([101, 101, 101, 102, 102])))
        array([1, 4, 1, 1, 3])
    """

    def __init__(self, num_bins: int, output_mode: str = "int", sparse: bool = False,
                 name: str | None = None, dtype: Any = None, **kwargs: Any):
        if output_mode == "int" and dtype is None:
            dtype = "int64"
        super().__init__(name=name, dtype=dtype, **kwargs)
        if num_bins is None or isinstance(num_bins, bool) or int(num_bins) <= 0:
            raise ValueError(f"HashedCrossing: num_bins must be a positive int, received "
                             f"num_bins={num_bins!r}")
        check_choice("HashedCrossing", "output_mode", output_mode, ("int", "one_hot"))
        if sparse:
            raise ValueError("HashedCrossing: sparse=True is not supported by kiln (its "
                             "tensors are dense)")
        self.num_bins = int(num_bins)
        self.output_mode = output_mode
        self.sparse = False

    @tf_entry
    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        self._check_inputs(inputs)
        if any(is_tf_tensor(x) for x in inputs):  # inside tf.data: TF's own op
            return self._tf_call(inputs)
        if any(is_symbolic(x) for x in inputs):
            raise host_only(self)
        return self.call(inputs)

    def _check_inputs(self, inputs: Any) -> None:
        if not isinstance(inputs, list | tuple):
            raise ValueError("HashedCrossing should be called on a list or tuple of inputs; "
                             f"received {type(inputs).__name__}")
        if len(inputs) < 2:
            raise ValueError(f"HashedCrossing should be called on at least two inputs; "
                             f"received {len(inputs)}")

    def _shape(self, inputs: list) -> tuple:
        first = tuple(inputs[0].shape)
        if len(first) > 2 or (len(first) == 2 and first[-1] != 1):
            raise ValueError("HashedCrossing: all inputs should have shape (), (batch_size) or "
                             f"(batch_size, 1); received shapes {[tuple(x.shape) for x in inputs]}")
        if any(tuple(x.shape) != first for x in inputs[1:]):
            raise ValueError(f"HashedCrossing: all inputs should have equal shapes; received "
                             f"{[tuple(x.shape) for x in inputs]}")
        return first

    def call(self, inputs: Any) -> np.ndarray:
        values = [np.asarray(x) for x in inputs]
        shape = self._shape(values)
        columns = [_feature_hashes(v.reshape(-1)) for v in values]
        out = []
        for row in zip(*columns):
            h = HASH_KEY
            for f in row:
                h = fingerprint_cat64(h, f)
            out.append(h % self.num_bins)
        bins = np.asarray(out, np.int64).reshape(shape)
        if self.output_mode == "one_hot" and bins.ndim == 2:
            bins = bins[:, 0]
        return encode_numpy(bins, self.output_mode, self.num_bins, self.dtype)

    def _tf_call(self, inputs: Any) -> Any:
        import tensorflow as tf

        xs = [tf.convert_to_tensor(x) for x in inputs]
        xs = [x if x.dtype == tf.string else tf.cast(x, tf.int64) for x in xs]
        shape = self._shape(xs)
        cols = [tf.reshape(x, (-1, 1)) for x in xs]
        out = tf.sparse.to_dense(tf.sparse.cross_hashed(cols, self.num_bins))
        out = tf.reshape(out, shape if None not in shape else tf.shape(xs[0]))
        if self.output_mode == "one_hot":
            if len(shape) == 2:
                out = out[:, 0]
            return tf.one_hot(out, self.num_bins, dtype=self.dtype or "float32")
        return tf.cast(out, self.dtype)

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = tuple(input_shape[0])
        if self.output_mode == "int":
            return shape
        return (self.num_bins,) if not shape else (
            shape[:-1] if shape[-1] == 1 else shape) + (self.num_bins,)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"num_bins": self.num_bins, "output_mode": self.output_mode,
                       "sparse": self.sparse})
        return config
