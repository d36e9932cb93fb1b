"""StringLookup and IntegerLookup: vocabulary lookups with Keras 3 semantics.

Index layout (Keras'): with ``mask_token`` set and ``output_mode="int"``, index 0 is the
mask; then come ``num_oov_indices`` out-of-vocabulary indices, then the vocabulary in order.
An unknown token maps to the OOV index (several OOV indices: ``floormod(value, n)`` for
integers, FarmHash64 / keyed SipHash of the token for strings, as Keras). ``invert=True`` maps
indices back to tokens. ``adapt`` orders the vocabulary by decreasing count, ties by
decreasing token (Keras' order). ``output_mode`` ``one_hot``/``multi_hot``/``count``/
``tf_idf`` encodes the indices (the mask encodes as zeros).

Both are data-preparation layers on NumPy arrays (they return NumPy arrays; docs/layers.md,
"Preprocessing"). IntegerLookup also runs inside a model on integer tensors (except with
``oov_method="farmhash"``): it then compares each value with the whole vocabulary, so keep
vocabularies moderate; an unknown value with ``num_oov_indices=0`` becomes -1 there (the
host path raises ValueError).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node
from kiln.layers.base import Layer, is_symbolic
from kiln.layers.host_tensor import has_host_tensor, host_call
from kiln.layers.preprocessing._base import check_choice
from kiln.layers.preprocessing._hashes import hash_buckets
from kiln.layers.preprocessing.encoding import ENCODE_MODES, encode, encode_numpy
from kiln.layers.preprocessing.hashing import parse_salt
from kiln.layers.preprocessing.numerical import _batches
from kiln.layers.preprocessing.tf_data import TFDataLayer, is_tf_tensor, tf_call, tf_entry


class IndexLookup(TFDataLayer, Layer):
    """The shared machinery of StringLookup and IntegerLookup (see the module docstring)."""

    _strings = True

    def __init__(self, max_tokens: int | None, num_oov_indices: int, mask_token: Any,
                 oov_token: Any, vocabulary: Any = None, idf_weights: Any = None,
                 invert: bool = False, output_mode: str = "int", sparse: bool = False,
                 pad_to_max_tokens: bool = False, oov_method: str = "floormod",
                 salt: Any = None, **kwargs: Any):
        who = type(self).__name__
        kwargs.pop("vocabulary_size", None)  # Keras config keys, recomputed here
        kwargs.pop("has_input_vocabulary", None)
        kwargs.pop("vocabulary_dtype", None)
        # Keras' deprecated names of two modes
        output_mode = {"binary": "multi_hot", "tf-idf": "tf_idf"}.get(output_mode, output_mode)
        if kwargs.get("dtype") is None and output_mode in ("one_hot", "multi_hot", "count"):
            kwargs["dtype"] = "int64"  # Keras 3's lookups encode to int64 (tf_idf: float)
        super().__init__(**kwargs)
        check_choice(who, "output_mode", output_mode, ("int",) + ENCODE_MODES)
        if max_tokens is not None and int(max_tokens) <= 1:
            raise ValueError(f"{who}: max_tokens must be greater than 1 when set, received "
                             f"max_tokens={max_tokens!r}")
        if isinstance(num_oov_indices, bool) or int(num_oov_indices) < 0:
            raise ValueError(f"{who}: num_oov_indices must be >= 0, received "
                             f"num_oov_indices={num_oov_indices!r}")
        if invert and output_mode != "int":
            raise ValueError(f"{who}: output_mode must be 'int' when invert=True, received "
                             f"output_mode={output_mode!r}")
        if sparse:
            raise ValueError(f"{who}: sparse=True is not supported by kiln")
        if idf_weights is not None and output_mode != "tf_idf":
            raise ValueError(f"{who}: idf_weights are only used with output_mode='tf_idf', "
                             f"received output_mode={output_mode!r}")
        if output_mode == "tf_idf" and vocabulary is not None and idf_weights is None:
            raise ValueError(f"{who}: output_mode='tf_idf' with a vocabulary needs idf_weights")
        if pad_to_max_tokens and max_tokens is None and output_mode != "int":
            raise ValueError(f"{who}: pad_to_max_tokens=True needs max_tokens")
        check_choice(who, "oov_method", oov_method, ("floormod", "farmhash"))
        self.max_tokens = None if max_tokens is None else int(max_tokens)
        self.num_oov_indices = int(num_oov_indices)
        self.mask_token = self._key(mask_token) if mask_token is not None else None
        self.oov_token = self._key(oov_token) if oov_token is not None else None
        self.invert = bool(invert)
        self.output_mode = output_mode
        self.sparse = False
        self.pad_to_max_tokens = bool(pad_to_max_tokens)
        self.oov_method = oov_method
        self.salt = parse_salt(who, salt)
        self._tokens: np.ndarray | None = None
        self._idf: np.ndarray | None = None
        if vocabulary is not None:
            self.set_vocabulary(vocabulary, idf_weights)

    # ---- keys ----------------------------------------------------------------------------
    def _key(self, value: Any) -> Any:
        raise NotImplementedError

    def _keys(self, values: Any) -> np.ndarray:
        raise NotImplementedError

    @property
    def _oov_start(self) -> int:
        return 1 if self.mask_token is not None and self.output_mode == "int" else 0

    @property
    def _token_start(self) -> int:
        return self._oov_start + self.num_oov_indices

    # ---- vocabulary ----------------------------------------------------------------------
    def vocabulary_size(self) -> int:
        """Indices in use: the mask and OOV indices plus the vocabulary."""
        return self._token_start + (0 if self._tokens is None else len(self._tokens))

    def get_vocabulary(self, include_special_tokens: bool = True) -> list:
        """The token of each index (special tokens first, as the layer outputs them)."""
        tokens = [] if self._tokens is None else self._tokens.tolist()
        vocab = [self.oov_token] * self._token_start + tokens
        if self.mask_token is not None and self.output_mode == "int":
            vocab[0] = self.mask_token
        return vocab if include_special_tokens else vocab[self._token_start:]

    def set_vocabulary(self, vocabulary: Any, idf_weights: Any = None) -> None:
        """Sets the vocabulary (a list or array of tokens, or a text file with one token per
        line), and with ``output_mode="tf_idf"`` the idf weights (one per token). A leading
        run of the special tokens (mask, OOV) is recognized and dropped, as in Keras."""
        who = f"Layer '{self.name}' ({type(self).__name__})"
        if self.output_mode == "tf_idf" and idf_weights is None:
            raise ValueError(f"{who}: idf_weights must be set with output_mode='tf_idf'")
        if self.output_mode != "tf_idf" and idf_weights is not None:
            raise ValueError(f"{who}: idf_weights are only used with output_mode='tf_idf'")
        if isinstance(vocabulary, str | os.PathLike):
            with open(vocabulary, encoding="utf-8") as f:
                vocabulary = [line.rstrip("\n").rstrip("\r") for line in f]
        vocab = self._keys(np.asarray(list(vocabulary)) if not isinstance(
            vocabulary, np.ndarray) else vocabulary).reshape(-1)
        if vocab.size == 0:
            raise ValueError(f"{who}: cannot set an empty vocabulary")
        special = [self.mask_token] * self._oov_start + [self.oov_token] * self.num_oov_indices
        found = len(vocab) >= len(special) and all(
            vocab[i] == s for i, s in enumerate(special))
        tokens = vocab[len(special):] if found else vocab
        uniq, counts = np.unique(tokens, return_counts=True)
        if np.any(counts > 1):
            raise ValueError(f"{who}: the vocabulary repeats {uniq[counts > 1].tolist()}; "
                             "make its tokens unique")
        for name, tok, applies in (("mask_token", self.mask_token, True),
                                   ("oov_token", self.oov_token, self.invert)):
            if applies and tok is not None and np.any(tokens == tok):
                raise ValueError(f"{who}: the vocabulary contains the {name} {tok!r}; special "
                                 "tokens may appear only at its start, in the order "
                                 f"{special}")
        size = self._token_start + len(tokens)
        if self.max_tokens is not None and size > self.max_tokens:
            raise ValueError(f"{who}: a vocabulary of size {size} exceeds max_tokens="
                             f"{self.max_tokens}")
        idf = None
        if idf_weights is not None:
            w = np.asarray(idf_weights, np.float64).reshape(-1)
            if len(w) != len(vocab):
                raise ValueError(f"{who}: idf_weights has {len(w)} entries, the vocabulary "
                                 f"{len(vocab)}")
            idf = w if found else np.concatenate([np.full(self._token_start, w.mean()), w])
        self._tokens, self._idf = tokens, idf
        self._eager_cache.clear()

    def adapt(self, data: Any, steps: int | None = None) -> None:
        """Learns the vocabulary (and idf weights) from ``data``: an array, or an iterable of
        batches; each row of a batch is a document."""
        who = f"Layer '{self.name}' ({type(self).__name__})"
        counts: dict = {}
        doc_counts: dict = {}
        n_docs = 0
        for i, batch in enumerate(_batches(type(self).__name__, data)):
            if steps is not None and i >= steps:
                break
            keys = self._keys(batch)
            if keys.ndim < 2:
                keys = keys.reshape(1, -1)
            uniq, cnt = np.unique(keys.reshape(-1), return_counts=True)
            for t, c in zip(uniq.tolist(), cnt.tolist()):
                counts[t] = counts.get(t, 0) + c
            if self.output_mode == "tf_idf":
                rows = keys.reshape(keys.shape[0], -1)
                n_docs += rows.shape[0]
                for row in rows:
                    for t in np.unique(row).tolist():
                        doc_counts[t] = doc_counts.get(t, 0) + 1
        for special in (self.mask_token, self.oov_token):
            counts.pop(special, None)
        if not counts:
            raise ValueError(f"{who}: adapt() found no tokens")
        toks = self._keys(np.asarray(list(counts)))
        cnts = np.asarray([counts[t] for t in toks.tolist()], np.int64)
        order = np.lexsort((toks, cnts))[::-1]
        if self.max_tokens:
            order = order[:self.max_tokens - self._token_start]
        self._tokens = toks[order]
        self._idf = None
        if self.output_mode == "tf_idf":
            df = np.asarray([doc_counts.get(t, 0) for t in self._tokens.tolist()], np.float64)
            idf = np.log(1.0 + n_docs / (1.0 + df))
            self._idf = np.concatenate([np.full(self._token_start, idf.mean()), idf])
        self._eager_cache.clear()

    # ---- calls ---------------------------------------------------------------------------
    def _depth(self) -> int:
        return self.max_tokens if self.pad_to_max_tokens else self.vocabulary_size()

    def _idf_vector(self) -> np.ndarray:
        if self._idf is None:
            raise ValueError(f"Layer '{self.name}': output_mode='tf_idf' needs idf weights "
                             "(pass idf_weights or call adapt())")
        return np.pad(self._idf, (0, max(self._depth() - len(self._idf), 0)))[:self._depth()]

    def _check_ready(self) -> None:
        if self._tokens is None and self.output_mode != "int" and not self.pad_to_max_tokens:
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}): set a vocabulary "
                             "or call adapt() before encoding")

    @tf_entry
    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if is_tf_tensor(inputs):  # inside tf.data: TF ops (tf_data.py)
            return tf_call(self, inputs, *args, **kwargs)
        if has_host_tensor(inputs):
            return host_call(self, inputs, *args, **kwargs)  # a model's host prefix
        self._check_ready()
        if is_symbolic(inputs):
            if self._strings or self.oov_method == "farmhash":
                return host_call(self, inputs, *args, **kwargs)
            return super().__call__(inputs, *args, **kwargs)
        return self.lookup(inputs)

    def lookup(self, values: Any) -> np.ndarray:
        """The layer on arrays, on the host (what calling it on NumPy arrays does)."""
        if self.invert:
            idx = np.asarray(values).astype(np.int64)
            table = np.asarray(self.get_vocabulary(), dtype=object)
            ok = (idx >= 0) & (idx < len(table))
            out = np.where(ok, table[np.clip(idx, 0, max(len(table) - 1, 0))]
                           if len(table) else self.oov_token, self.oov_token)
            return out.astype(str if self._strings else np.int64)
        keys = self._keys(values)
        table = {t: i + self._token_start for i, t in enumerate(
            [] if self._tokens is None else self._tokens.tolist())}
        uniq, inverse = np.unique(keys.reshape(-1), return_inverse=True)
        found = np.asarray([table.get(t, -1) for t in uniq.tolist()], np.int64)
        idx = found[inverse].reshape(keys.shape)
        oov = idx < 0
        if self.mask_token is not None:
            oov &= keys != self.mask_token
        if self.num_oov_indices == 0 and np.any(oov):
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}): with "
                             f"num_oov_indices=0 every input must be in the vocabulary; found "
                             f"{np.unique(keys[oov])[:10].tolist()}")
        if self.num_oov_indices == 1:
            idx = np.where(oov, self._oov_start, idx)
        elif self.num_oov_indices > 1:
            idx = np.where(oov, self._oov_bucket(keys) + self._oov_start, idx)
        if self.mask_token is not None:
            idx = np.where(keys == self.mask_token, 0 if self.output_mode == "int" else -1, idx)
        if self.output_mode == "int":
            return idx.astype(np.int64)
        mode = "count" if self.output_mode == "tf_idf" else self.output_mode
        out = encode_numpy(idx, mode, self._depth(), self.dtype)
        if self.output_mode == "tf_idf":
            out = (out * self._idf_vector().astype(self.dtype)).astype(self.dtype)
        return out

    def _oov_bucket(self, keys: np.ndarray) -> np.ndarray:
        n = self.num_oov_indices
        if not self._strings and self.oov_method == "floormod":
            return np.mod(keys, n)
        return hash_buckets(keys, n, None if self.salt is None else tuple(self.salt))

    def get_config(self) -> dict:
        config = super().get_config()
        vocab = self.get_vocabulary() if self._tokens is not None else None
        config.update({
            "invert": self.invert, "max_tokens": self.max_tokens,
            "num_oov_indices": self.num_oov_indices, "oov_token": self.oov_token,
            "mask_token": self.mask_token, "output_mode": self.output_mode,
            "sparse": self.sparse, "pad_to_max_tokens": self.pad_to_max_tokens,
            "idf_weights": None if self._idf is None else self._idf.tolist(),
            "vocabulary": vocab, "vocabulary_size": self.vocabulary_size(), "salt": self.salt,
        })
        return config


class StringLookup(IndexLookup):
    """Maps strings to integer indices with a vocabulary (Keras' ``StringLookup``); see the
    module docstring for the index layout and output modes.

    A data-preparation layer: call it on NumPy arrays of strings (or bytes) before ``fit``
    or where your batches are made; it returns NumPy arrays (int64 indices, float32
    encodings, or strings with ``invert=True``).

    Args:
        max_tokens: the largest vocabulary size (special tokens included) ``adapt`` keeps.
        num_oov_indices: indices for unknown tokens (default 1; 0 makes them an error).
        mask_token: a token for padding, mapped to index 0 (None: no mask).
        oov_token: the token ``invert`` returns for OOV indices (default ``"[UNK]"``).
        vocabulary: the tokens (a list, an array, or a text file, one token per line).
        idf_weights: with ``output_mode="tf_idf"``, one weight per token.
        invert: map indices to tokens.
        output_mode: ``"int"`` (default), ``"one_hot"``, ``"multi_hot"``, ``"count"`` or
            ``"tf_idf"``.
        pad_to_max_tokens: encode to depth ``max_tokens`` instead of the vocabulary size.
        sparse: must be False.
        encoding: the text encoding of bytes inputs (default ``"utf-8"``).
        salt: an int or pair of ints: hash extra OOV buckets with the keyed SipHash.

    Example:
        >>> lookup = kiln.layers.StringLookup(vocabulary=["a", "b", "c"])
        >>> lookup(np.array([["a", "c", "z"]]))
        array([[1, 3, 0]])
    """

    def __init__(self, max_tokens: int | None = None, num_oov_indices: int = 1,
                 mask_token: str | None = None, oov_token: str = "[UNK]", vocabulary: Any = None,
                 idf_weights: Any = None, invert: bool = False, output_mode: str = "int",
                 pad_to_max_tokens: bool = False, sparse: bool = False, encoding: str = "utf-8",
                 name: str | None = None, salt: Any = None, **kwargs: Any):
        kwargs["name"] = name
        self.encoding = str(encoding)
        kwargs.pop("oov_method", None)
        super().__init__(max_tokens, num_oov_indices, mask_token, oov_token, vocabulary,
                         idf_weights, invert, output_mode, sparse, pad_to_max_tokens,
                         salt=salt, **kwargs)

    def _key(self, value: Any) -> str:
        return value.decode(self.encoding) if isinstance(value, bytes) else str(value)

    def _keys(self, values: Any) -> np.ndarray:
        arr = np.asarray(values)
        if arr.dtype.kind == "U":
            return arr
        if arr.dtype.kind == "S":
            return np.char.decode(arr, self.encoding)
        if arr.dtype.kind == "O" or arr.size == 0:
            flat = [self._key(v) for v in arr.reshape(-1)]
            return np.asarray(flat, dtype=str).reshape(arr.shape)
        raise TypeError(f"Layer '{self.name}' (StringLookup) expects strings, received an "
                        f"array of dtype {arr.dtype}")

    def get_config(self) -> dict:
        config = super().get_config()
        config["encoding"] = self.encoding
        return config


class IntegerLookup(IndexLookup):
    """Maps integers to contiguous indices with a vocabulary (Keras' ``IntegerLookup``); see
    the module docstring for the index layout, output modes and where it runs.

    Args:
        max_tokens, num_oov_indices, vocabulary, idf_weights, invert, output_mode,
        pad_to_max_tokens, sparse: as in ``StringLookup`` (tokens are ints).
        mask_token: an int mapped to index 0 (None: no mask).
        oov_token: the int ``invert`` returns for OOV indices (default -1).
        vocabulary_dtype: must be ``"int64"``.
        oov_method: ``"floormod"`` (default: extra OOV index ``value % num_oov_indices``) or
            ``"farmhash"`` (hash of the decimal string; host only).
        salt: with ``"farmhash"``, an int or pair of ints for the keyed SipHash.

    Example:
        >>> kiln.layers.IntegerLookup(vocabulary=[12, 36, 1138])(np.array([12, 1138, 7]))
        array([1, 3, 0])
    """

    _strings = False

    def __init__(self, max_tokens: int | None = None, num_oov_indices: int = 1,
                 mask_token: int | None = None, oov_token: int = -1, vocabulary: Any = None,
                 vocabulary_dtype: str = "int64", idf_weights: Any = None, invert: bool = False,
                 output_mode: str = "int", sparse: bool = False,
                 pad_to_max_tokens: bool = False, oov_method: str = "floormod",
                 salt: Any = None, name: str | None = None, **kwargs: Any):
        kwargs["name"] = name
        if vocabulary_dtype != "int64":
            raise ValueError(f"IntegerLookup: only vocabulary_dtype='int64' is supported, "
                             f"received {vocabulary_dtype!r}")
        self.vocabulary_dtype = "int64"
        super().__init__(max_tokens, num_oov_indices, mask_token, oov_token, vocabulary,
                         idf_weights, invert, output_mode, sparse, pad_to_max_tokens,
                         oov_method, salt, **kwargs)

    def _key(self, value: Any) -> int:
        return int(value)

    def _keys(self, values: Any) -> np.ndarray:
        arr = np.asarray(values)
        if arr.dtype.kind not in "iub" and arr.size:
            raise TypeError(f"Layer '{self.name}' (IntegerLookup) expects integers, received "
                            f"an array of dtype {arr.dtype}")
        return arr.astype(np.int64)

    def call(self, inputs: Node) -> Node:
        x = K.cast(inputs, "int64") if inputs.dtype != "int64" else inputs
        if self.invert:
            table = K.constant(np.asarray(self.get_vocabulary(), np.int64), "int64")
            n = self.vocabulary_size()
            ok = K.logical_and(K.greater_equal(x, K.constant(0, "int64")),
                               K.less(x, K.constant(n, "int64")))
            safe = K.where(ok, x, K.constant(0, "int64"))
            return K.where(ok, K.take(table, safe), K.constant(self.oov_token, "int64"))
        tokens = np.zeros(0, np.int64) if self._tokens is None else self._tokens
        if len(tokens):
            eq = K.equal(K.expand_dims(x, -1), K.constant(tokens, "int64"))
            pos = K.constant(np.arange(len(tokens), dtype=np.int64) + self._token_start, "int64")
            idx = K.sum(K.where(eq, pos, K.constant(0, "int64")), axis=-1)
            found = K.any(eq, axis=-1)
        else:
            idx, found = x * K.constant(0, "int64"), K.less(x, x)
        if self.num_oov_indices == 0:
            default: Any = K.constant(-1, "int64")
        elif self.num_oov_indices == 1:
            default = K.constant(self._oov_start, "int64")
        else:
            xf = K.cast(x, "float64")
            n = K.constant(float(self.num_oov_indices), "float64")
            default = K.cast(xf - n * K.floor(xf / n), "int64") + K.constant(self._oov_start,
                                                                            "int64")
        idx = K.where(found, idx, default)
        if self.mask_token is not None:
            idx = K.where(K.equal(x, K.constant(self.mask_token, "int64")),
                          K.constant(0 if self.output_mode == "int" else -1, "int64"), idx)
        if self.output_mode == "int":
            return idx
        mode = "count" if self.output_mode == "tf_idf" else self.output_mode
        out = encode(idx, mode, self._depth(), self.dtype)
        if self.output_mode == "tf_idf":
            out = out * K.constant(self._idf_vector(), self.dtype)
        return out

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"vocabulary_dtype": "int64", "oov_method": self.oov_method})
        return config
