"""``TextVectorization`` (Keras 3's ``keras.layers.TextVectorization``): texts to token
indices or encoded vectors.

The steps, as in Keras: standardize each text (``"lower_and_strip_punctuation"`` by
default: ASCII lower-casing, as ``tf.strings.lower``, and removal of Keras' punctuation set),
split it into tokens (``"whitespace"``, ``"character"``, None or a callable), form
``ngrams``, and look the tokens up in a vocabulary (a :class:`StringLookup` with mask token
``""`` at index 0 and the OOV token ``"[UNK]"`` at index 1 in ``"int"`` mode).

Where it runs: strings never enter a kiln graph. Called on NumPy arrays (or lists) of str or
bytes it computes on the host and returns NumPy arrays; called on a TensorFlow tensor (inside
``tf.data.Dataset.map``) it computes with TF ops, exactly as Keras does. Put it in the data
pipeline, before the model, as Keras does with a non-TensorFlow backend::

    vectorize = kiln.layers.TextVectorization(max_tokens=20000, output_sequence_length=200)
    vectorize.adapt(train_texts)
    train = tf_dataset.map(lambda x, y: (vectorize(x), y))   # or vectorize(numpy_texts)
    model.fit(train, ...)                                     # the model starts at Embedding

A callable ``standardize`` gets a NumPy array of str and returns one (on a TF tensor: a
string tensor, as in Keras); a callable ``split`` gets a NumPy array of str and returns one
list of tokens per text (on a TF tensor: a ragged string tensor).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.eager import eager_result
from kiln.layers.base import Layer, is_symbolic
from kiln.layers.host_tensor import has_host_tensor, host_call
from kiln.layers.preprocessing._base import check_choice
from kiln.layers.preprocessing.encoding import encode_numpy
from kiln.layers.preprocessing.lookup import StringLookup
from kiln.layers.preprocessing.tf_data import is_tf_tensor, tf_entry
from kiln.registry import get_registered_name, get_registered_object

PUNCTUATION = r'[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~\']'
_PUNCT_RE = re.compile(PUNCTUATION)
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class TextVectorization(Layer):
    """Maps texts to token indices (``"int"``) or to one vector per text (``"multi_hot"``,
    ``"count"``, ``"tf_idf"``, ``"one_hot"``), like ``keras.layers.TextVectorization``.

    Args:
        max_tokens: The largest vocabulary ``adapt`` keeps, mask and OOV tokens included.
        standardize: ``"lower_and_strip_punctuation"`` (default), ``"lower"``,
            ``"strip_punctuation"``, None or a callable (see the module docstring).
        split: ``"whitespace"`` (default), ``"character"``, None (each text is one token) or
            a callable.
        ngrams: None, an int ``n`` (all 1- to n-grams) or a tuple of n-gram widths.
        output_mode: ``"int"`` (default), ``"multi_hot"``, ``"count"``, ``"tf_idf"`` or
            ``"one_hot"``.
        output_sequence_length: With ``"int"``: pad with 0 or truncate every row to this
            length (None: pad to the longest text of the batch).
        pad_to_max_tokens: Encode to depth ``max_tokens`` instead of the vocabulary size.
        vocabulary: A list or array of tokens, or a text file with one token per line.
        idf_weights: With ``"tf_idf"`` and a vocabulary: one weight per token.
        sparse, ragged: Must be False (kiln has no sparse or ragged arrays).
        encoding: The encoding of bytes inputs (default ``"utf-8"``).

    Example (Keras' docstring example):
        >>> vectorize = kiln.layers.TextVectorization(max_tokens=5000,
        ...                                           output_sequence_length=4)
        >>> vectorize.adapt(["foo bar", "bar baz", "baz bada boom"])
        >>> vectorize([["foo qux bar"], ["qux baz"]])
        array([[4, 1, 3, 0],
               [1, 2, 0, 0]])
    """

    def __init__(self, max_tokens: int | None = None,
                 standardize: str | Callable | None = "lower_and_strip_punctuation",
                 split: str | Callable | None = "whitespace", ngrams: Any = None,
                 output_mode: str = "int", output_sequence_length: int | None = None,
                 pad_to_max_tokens: bool = False, vocabulary: Any = None,
                 idf_weights: Any = None, sparse: bool = False, ragged: bool = False,
                 encoding: str = "utf-8", name: str | None = None, **kwargs: Any):
        kwargs.pop("vocabulary_size", None)  # Keras config keys, recomputed here
        kwargs.pop("has_input_vocabulary", None)
        super().__init__(name=name, **kwargs)
        who = "TextVectorization"
        if not callable(standardize):
            check_choice(who, "standardize", standardize,
                         (None, "lower_and_strip_punctuation", "lower", "strip_punctuation"))
        if not callable(split):
            check_choice(who, "split", split, (None, "whitespace", "character"))
        output_mode = {"binary": "multi_hot", "tf-idf": "tf_idf"}.get(output_mode, output_mode)
        check_choice(who, "output_mode", output_mode,
                     ("int", "one_hot", "multi_hot", "count", "tf_idf"))
        if isinstance(ngrams, list):
            ngrams = tuple(ngrams)
        if not (ngrams is None or (isinstance(ngrams, int) and not isinstance(ngrams, bool)
                                   and ngrams > 0)
                or (isinstance(ngrams, tuple) and ngrams
                    and all(isinstance(n, int) and n > 0 for n in ngrams))):
            raise ValueError(f"{who}: ngrams must be None, a positive integer, or a tuple of "
                             f"positive integers, received ngrams={ngrams!r}")
        if output_sequence_length is not None:
            if output_mode != "int":
                raise ValueError(f"{who}: output_sequence_length must not be set if "
                                 f"output_mode is not 'int', received output_mode="
                                 f"{output_mode!r}, output_sequence_length="
                                 f"{output_sequence_length!r}")
            if isinstance(output_sequence_length, bool) or not isinstance(
                    output_sequence_length, int) or output_sequence_length < 1:
                raise ValueError(f"{who}: output_sequence_length must be a positive integer "
                                 f"or None, received {output_sequence_length!r}")
        if sparse or ragged:
            raise ValueError(f"{who}: sparse=True and ragged=True are not supported by kiln "
                             f"(received sparse={sparse!r}, ragged={ragged!r})")
        self.standardize = standardize
        self.split = split
        self.ngrams = ngrams
        self._widths = tuple(range(1, ngrams + 1)) if isinstance(ngrams, int) else ngrams
        self.output_mode = output_mode
        self.output_sequence_length = output_sequence_length
        self.encoding = encoding
        self._input_vocabulary = None if vocabulary is None or isinstance(vocabulary, str) \
            else list(vocabulary)
        self._input_idf = None if idf_weights is None else list(np.asarray(idf_weights,
                                                                           float).tolist())
        self._table: tuple | None = None  # (vocabulary array, {token: index})
        self._lookup = StringLookup(
            max_tokens=max_tokens, vocabulary=vocabulary, idf_weights=idf_weights,
            pad_to_max_tokens=pad_to_max_tokens, mask_token="", output_mode=output_mode,
            encoding=encoding, name=f"{self.name}_lookup",
            dtype="float32" if output_mode == "tf_idf" else "int64")

    # ---- vocabulary ----------------------------------------------------------------------
    @property
    def max_tokens(self) -> int | None:
        return self._lookup.max_tokens

    @property
    def pad_to_max_tokens(self) -> bool:
        return self._lookup.pad_to_max_tokens

    def get_vocabulary(self, include_special_tokens: bool = True) -> list:
        """The token of each index (``""`` and ``"[UNK]"`` first in ``"int"`` mode)."""
        return self._lookup.get_vocabulary(include_special_tokens)

    def vocabulary_size(self) -> int:
        """The vocabulary size, mask and OOV tokens included."""
        return self._lookup.vocabulary_size()

    def set_vocabulary(self, vocabulary: Any, idf_weights: Any = None) -> None:
        """Sets the vocabulary (a list, an array or a text file) and, with ``"tf_idf"``, the
        idf weights, replacing what the layer had."""
        self._lookup.set_vocabulary(vocabulary, idf_weights)

    def adapt(self, data: Any, batch_size: int | None = None, steps: int | None = None) -> None:
        """Learns the vocabulary (most frequent tokens first, ties by token, high to low) and,
        with ``"tf_idf"``, the idf weights, from ``data``: an array or list of texts, a
        ``tf.data.Dataset`` or kiln dataset of batches of texts, or any iterable of batches.
        A ``(texts, labels)`` element contributes its texts."""
        def batches() -> Any:
            if isinstance(data, np.ndarray | list | tuple | str | bytes) or is_tf_tensor(data):
                yield data
                return
            for i, batch in enumerate(data):
                if steps is not None and i >= steps:
                    return
                yield batch[0] if isinstance(batch, tuple) else batch
        self._lookup.adapt(_pad(self._tokens(b)) for b in batches())

    # ---- the steps, on the host ----------------------------------------------------------
    def _texts(self, inputs: Any) -> np.ndarray:
        arr = np.asarray(inputs.numpy() if hasattr(inputs, "numpy") else inputs, dtype=object)
        flat = [v.decode(self.encoding) if isinstance(v, bytes) else str(v)
                for v in arr.reshape(-1)]
        return np.asarray(flat, dtype=object).reshape(arr.shape)

    def _standardized(self, texts: np.ndarray) -> np.ndarray:
        std = self.standardize
        if callable(std):
            return self._texts(std(texts.astype(str)))
        if std in ("lower", "lower_and_strip_punctuation"):
            texts = np.vectorize(lambda s: s.translate(_ASCII_LOWER), otypes=[object])(texts)
        if std in ("strip_punctuation", "lower_and_strip_punctuation"):
            texts = np.vectorize(lambda s: _PUNCT_RE.sub("", s), otypes=[object])(texts)
        return texts

    def _tokens(self, inputs: Any) -> list[list[str]] | np.ndarray:
        """Standardized, split texts with their n-grams: one token list per text (or, with
        ``split=None`` and no n-grams, the standardized array itself)."""
        texts = self._texts(inputs)
        if texts.ndim == 0:
            texts = texts.reshape(1)
        texts = self._standardized(texts)
        if self.split is None:
            if self._widths is None:
                return texts
            rows = [list(r) for r in (texts if texts.ndim > 1 else texts[:, None])]
        else:
            if texts.ndim > 1:
                if texts.shape[-1] != 1:
                    raise ValueError(
                        f"Layer '{self.name}' (TextVectorization): to split strings the input "
                        f"rank must be 1 or the last dimension must be 1, received shape "
                        f"{texts.shape}")
                texts = texts[..., 0]
            texts = texts.reshape(-1)
            if callable(self.split):
                rows = [[self._texts(t).item() if not isinstance(t, str) else t
                         for t in row] for row in self.split(texts.astype(str))]
            elif self.split == "whitespace":
                rows = [t.split() for t in texts]
            else:
                rows = [list(t) for t in texts]
        if self._widths is not None:
            rows = [[" ".join(r[i:i + w]) for w in self._widths
                     for i in range(len(r) - w + 1)] for r in rows]
        return rows

    @tf_entry
    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if is_tf_tensor(inputs):
            from kiln.layers.preprocessing.tf_data import text_vectorization
            return text_vectorization(self, inputs)
        if is_symbolic(inputs) or has_host_tensor(inputs):
            return host_call(self, inputs, *args, **kwargs)  # a model's host prefix
        # an eager result, as Keras returns: ``.numpy()`` works on it
        return eager_result(self.call(inputs))

    def call(self, inputs: Any) -> np.ndarray:
        tokens = self._tokens(inputs)
        if isinstance(tokens, np.ndarray):  # split=None: the lookup on the texts themselves
            return self._lookup(tokens.astype(str) if self.output_mode == "int"
                                else _pad(tokens))
        lk = self._lookup
        lk._check_ready()
        # the lookup's indices, token by token through a dict (what StringLookup computes
        # on the padded array, without sorting every token of the batch)
        width = self.output_sequence_length if self.output_mode == "int" else None
        idx = self._indices(tokens, width, 0 if self.output_mode == "int" else -1)
        if self.output_mode == "int":
            return idx
        mode = "count" if self.output_mode == "tf_idf" else self.output_mode
        out = encode_numpy(idx, mode, lk._depth(), lk.dtype)
        if self.output_mode == "tf_idf":
            out = (out * lk._idf_vector().astype(lk.dtype)).astype(lk.dtype)
        return out

    def _indices(self, rows: list[list[str]], width: int | None, pad: int) -> np.ndarray:
        lk = self._lookup
        if self._table is None or self._table[0] is not lk._tokens:
            tokens = [] if lk._tokens is None else lk._tokens.tolist()
            self._table = (lk._tokens, {t: i + lk._token_start for i, t in enumerate(tokens)})
        table, oov = self._table[1], lk._oov_start
        if width is None:
            width = max((len(r) for r in rows), default=0)
        out = np.full((len(rows), width), pad, np.int64)
        for i, r in enumerate(rows):
            ids = [table.get(t, oov) for t in r[:width]]
            out[i, :len(ids)] = ids
        return out

    def compute_output_shape(self, input_shape: Any) -> tuple:
        if self.output_mode == "int":
            return (input_shape[0], self.output_sequence_length)
        depth = self._lookup._depth()
        return (input_shape[0], depth)

    # ---- config --------------------------------------------------------------------------
    def get_config(self) -> dict:
        config = super().get_config()
        vocab = self.get_vocabulary() if self._lookup._tokens is not None else None
        idf = None if self._lookup._idf is None else self._lookup._idf.tolist()
        config.update({
            "max_tokens": self.max_tokens,
            "standardize": _serialize_fn(self.standardize),
            "split": _serialize_fn(self.split),
            "ngrams": self.ngrams, "output_mode": self.output_mode,
            "output_sequence_length": self.output_sequence_length,
            "pad_to_max_tokens": self.pad_to_max_tokens, "sparse": False, "ragged": False,
            "vocabulary": vocab, "idf_weights": idf, "encoding": self.encoding,
            "vocabulary_size": self.vocabulary_size(),
        })
        return config

    @classmethod
    def from_config(cls, config: dict) -> TextVectorization:
        config = dict(config)
        for key in ("standardize", "split"):
            if isinstance(config.get(key), dict):
                config[key] = _deserialize_fn(config[key], key)
        if isinstance(config.get("ngrams"), list):
            config["ngrams"] = tuple(config["ngrams"])
        return cls(**config)


def _serialize_fn(fn: Any) -> Any:
    """A string option as it is; a callable as Keras stores a function (it must be
    registered with ``register_keras_serializable`` to load again)."""
    if not callable(fn):
        return fn
    return {"module": getattr(fn, "__module__", None), "class_name": "function",
            "config": getattr(fn, "__name__", repr(fn)),
            "registered_name": get_registered_name(fn) or getattr(fn, "__name__", None)}


def _deserialize_fn(config: dict, key: str) -> Any:
    name = config.get("registered_name") or config.get("config")
    fn = get_registered_object(str(name)) if name else None
    if fn is None:
        raise ValueError(f"TextVectorization: cannot load the {key} function {name!r}: "
                         "register it with kiln.saving.register_keras_serializable() or pass "
                         "it in custom_objects")
    return fn


def _pad(rows: Any, length: int | None = None) -> np.ndarray:
    """Token lists as a rectangular array of str, padded with ``""`` (the mask) to the
    longest row or cut/padded to ``length``."""
    if isinstance(rows, np.ndarray):
        return rows.astype(str) if rows.ndim > 1 else rows.astype(str)[:, None]
    width = max((len(r) for r in rows), default=0) if length is None else length
    out = np.full((len(rows), max(width, 0)), "", dtype=object)
    for i, r in enumerate(rows):
        r = r[:width]
        out[i, :len(r)] = r
    return out.astype(str) if out.size else np.zeros((len(rows), width), dtype="<U1")


__all__ = ["TextVectorization"]
