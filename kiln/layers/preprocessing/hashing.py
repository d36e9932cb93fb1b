"""Hashing: values to bins by FarmHash64 (or salted SipHash), on the host.

Like StringLookup, this is a data-preparation layer (docs/layers.md, "Preprocessing"): it
takes NumPy arrays (strings, bytes or numbers) and returns NumPy arrays, before ``fit`` or in
a data pipeline; a compiled graph has no strings, so it cannot be called on symbolic tensors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.layers.base import Layer, is_symbolic
from kiln.layers.host_tensor import has_host_tensor, host_call
from kiln.layers.preprocessing._base import check_choice
from kiln.layers.preprocessing._hashes import hash_buckets
from kiln.layers.preprocessing.encoding import ENCODE_MODES, encode_numpy
from kiln.layers.preprocessing.tf_data import TFDataLayer, is_tf_tensor, tf_call, tf_entry


def host_only(layer: Layer) -> TypeError:
    """The error for a data-preparation layer called on a symbolic tensor."""
    return TypeError(f"Layer '{layer.name}' ({type(layer).__name__}) prepares data on the host: "
                     "call it on NumPy arrays (before fit, or in the function that yields your "
                     "batches), not on symbolic tensors inside a model (docs/layers.md, "
                     "'Preprocessing')")


def parse_salt(who: str, salt: Any) -> list[int] | None:
    if salt is None:
        return None
    if isinstance(salt, list | tuple) and len(salt) == 2:
        return [int(salt[0]), int(salt[1])]
    if isinstance(salt, int | np.integer) and not isinstance(salt, bool):
        return [int(salt), int(salt)]
    raise ValueError(f"{who}: salt must be an int or a pair of ints, received salt={salt!r}")


class Hashing(TFDataLayer, Layer):
    """Hashes values into ``num_bins`` bins (Keras' ``Hashing``): the value's string form
    (numbers in decimal, floats truncated to int) hashed with FarmHash ``Fingerprint64``
    (TensorFlow's ``to_hash_bucket_fast``), or with SipHash-2-4 keyed by ``salt``
    (``to_hash_bucket_strong``), modulo the number of bins; the results equal Keras'.

    A data-preparation layer: call it on NumPy arrays (it returns NumPy arrays).

    Args:
        num_bins: the number of bins (with ``mask_value``, bin 0 is reserved for it and the
            others hash into ``[1, num_bins)``).
        mask_value: a value mapped to bin 0.
        salt: an int or a pair of ints: use the keyed SipHash.
        output_mode: ``"int"`` (default, int64 bins), ``"one_hot"``, ``"multi_hot"`` or
            ``"count"`` (float32, depth ``num_bins``).
        sparse: must be False.

    Example:
        >>> kiln.layers.Hashing(3)(np.array([["A"], ["B"], ["C"], ["D"], ["E"]]))
        array([[1], [0], [1], [1], [2]])
    """

    def __init__(self, num_bins: int, mask_value: Any = None, salt: Any = None,
                 output_mode: str = "int", sparse: bool = False, **kwargs: Any):
        if kwargs.get("dtype") is None:
            kwargs["dtype"] = "int64" if output_mode == "int" else None
        super().__init__(**kwargs)
        if num_bins is None or isinstance(num_bins, bool) or int(num_bins) <= 0:
            raise ValueError(f"Hashing: num_bins must be a positive int, received "
                             f"num_bins={num_bins!r}")
        check_choice("Hashing", "output_mode", output_mode, ("int",) + ENCODE_MODES[:3])
        if output_mode == "int" and self.dtype not in ("int32", "int64"):
            raise ValueError(f"Hashing: output_mode='int' needs dtype int32 or int64, received "
                             f"dtype={self.dtype!r}")
        if sparse:
            raise ValueError("Hashing: sparse=True is not supported by kiln")
        self.num_bins = int(num_bins)
        self.mask_value = mask_value
        self.salt = parse_salt("Hashing", salt)
        self.output_mode = output_mode
        self.sparse = False

    @tf_entry
    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if is_tf_tensor(inputs):  # inside tf.data: TF ops (tf_data.py)
            return tf_call(self, inputs, *args, **kwargs)
        if is_symbolic(inputs) or has_host_tensor(inputs):
            return host_call(self, inputs, *args, **kwargs)  # a model's host prefix
        return self.call(np.asarray(inputs))

    def call(self, inputs: Any) -> np.ndarray:
        values = np.asarray(inputs)
        if self.output_mode == "one_hot" and values.ndim and values.shape[-1] == 1:
            values = values[..., 0]
        bins = self.num_bins
        mask = None
        if self.mask_value is not None and bins > 1:
            bins -= 1
            mask = np.asarray(values == self.mask_value, bool)
        out = hash_buckets(values, bins, None if self.salt is None else tuple(self.salt))
        if mask is not None:
            out = np.where(mask, 0, out + 1)
        return encode_numpy(out, self.output_mode, self.num_bins, self.dtype)

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = tuple(input_shape)
        if self.output_mode == "int":
            return shape
        return (self.num_bins,) if not shape else shape[:-1] + (self.num_bins,)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"num_bins": self.num_bins, "mask_value": self.mask_value,
                       "salt": self.salt, "output_mode": self.output_mode,
                       "sparse": self.sparse})
        return config
