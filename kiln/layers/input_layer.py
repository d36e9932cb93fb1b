"""``Input`` and ``InputLayer``: the symbolic entry points of a functional model."""

from __future__ import annotations

from typing import Any

from kiln.core import Node, canonical_dtype, placeholder
from kiln.layers.base import HISTORY, CallRecord, Layer
from kiln.layers.host_tensor import HostTensor, is_string_dtype

#: Input dtypes kiln computes in a wider type (Keras' ``Input(dtype="uint8")`` for raw image
#: bytes, which a Rescaling layer then scales): the values fed are converted exactly
_WIDENED = {"uint8": "int32", "int8": "int32", "uint16": "int32", "int16": "int32",
            "uint32": "int64", "float16": "float32", "bfloat16": "float32"}


def _widened(dtype: Any) -> Any:
    name = getattr(dtype, "name", dtype)
    return _WIDENED.get(name, dtype) if isinstance(name, str) else dtype


class InputLayer(Layer):
    """Holds the placeholder that feeds a model (``layer.output``).

    Args:
        shape: the shape of one sample (without the batch dimension), e.g. ``(784,)``.
        batch_size: optional fixed batch size (default: any, ``None``).
        dtype: the input's dtype (default ``kiln.config.floatx()``; use ``"int32"`` for
            token ids).
        batch_shape: the full shape including the batch dimension, instead of ``shape`` and
            ``batch_size``.
        name: optional name.

    Example:
        >>> layer = kiln.layers.InputLayer(shape=(28, 28, 1))
        >>> layer.output.shape
        (None, 28, 28, 1)
    """

    def __init__(self, shape: Any = None, batch_size: int | None = None, dtype: Any = None,
                 sparse: Any = None, ragged: Any = None, batch_shape: Any = None,
                 input_tensor: Any = None, optional: bool = False, name: str | None = None,
                 **kwargs: Any):
        for key, value in (("ragged", ragged), ("optional", optional)):
            if value:
                raise ValueError(f"InputLayer: {key}=True is not supported by kiln (every "
                                 "model input is a dense tensor that must be given)")
        legacy = kwargs.pop("batch_input_shape", None)  # Keras 2 configs
        if legacy is not None and batch_shape is None and shape is None:
            batch_shape = legacy
        kwargs.pop("input_shape", None)
        if input_tensor is not None:
            raise ValueError("InputLayer: input_tensor is not supported by kiln")
        if kwargs:
            raise TypeError(f"InputLayer: unexpected keyword argument(s) {sorted(kwargs)}")
        if sparse:
            raise ValueError("InputLayer: sparse inputs are not supported by kiln")
        if shape is not None and batch_shape is not None:
            raise ValueError("InputLayer: pass either `shape` or `batch_shape`, not both; "
                             f"received shape={shape!r} and batch_shape={batch_shape!r}")
        if batch_shape is None:
            if shape is None:
                raise ValueError("InputLayer: pass `shape` (the shape of one sample, e.g. "
                                 "(784,)) or `batch_shape`")
            if isinstance(shape, int):
                shape = (shape,)
            batch_shape = (batch_size,) + tuple(shape)
        batch_shape = tuple(None if d is None else int(d) for d in batch_shape)
        strings = is_string_dtype(dtype)
        super().__init__(name=name, dtype=canonical_dtype(_widened(dtype)) if dtype and
                         not strings else None)
        self.batch_shape = batch_shape
        self.output: Node | HostTensor
        if strings:  # strings never enter a kiln graph: a host-side input (host_tensor.py)
            self.dtype = "string"
            self.output = HostTensor(batch_shape, "string", name=self.name)
        else:
            self.output = placeholder(batch_shape, self.dtype, name=self.name)
        self.built = True
        self.build_input_shape = batch_shape
        self._inbound.append(CallRecord([], self.output, {}))
        HISTORY[self.output] = (self, 0, 0)

    @property
    def shape(self) -> tuple:
        return self.batch_shape

    def call(self, inputs: Any) -> Any:
        return inputs

    def get_config(self) -> dict:
        return {"batch_shape": self.batch_shape, "dtype": self.dtype, "sparse": False,
                "ragged": False, "name": self.name, "optional": False}


def Input(shape: Any = None, batch_size: int | None = None, dtype: Any = None,  # noqa: N802
          sparse: Any = None, ragged: Any = None, batch_shape: Any = None,
          name: str | None = None, tensor: Any = None, optional: bool = False) -> Node:
    """A symbolic input tensor for the functional API (the output of a new ``InputLayer``).

    Args:
        shape: the shape of one sample, e.g. ``(784,)`` or ``(28, 28, 1)``.
        batch_size: optional fixed batch size (default: any).
        dtype: the dtype (default ``kiln.config.floatx()``; ``"int32"`` for token ids;
            ``"string"`` for raw texts or categories, which only host preprocessing layers
            such as TextVectorization take: see ``kiln.layers.host_tensor``).
        name: optional name.
        batch_shape: the full shape including the batch dimension, instead of ``shape``.
        sparse, ragged, tensor, optional: Keras' sparse, ragged, wrapped and optional inputs
            are not supported: a true value (a tensor) raises ValueError.

    Returns:
        A placeholder of shape ``(batch_size,) + shape``, registered to its ``InputLayer``.

    Example:
        >>> x = kiln.Input((784,))
        >>> y = kiln.layers.Dense(10, activation="softmax")(x)
        >>> model = kiln.Model(x, y)
    """
    if tensor is not None:
        raise ValueError("Input: tensor= is not supported by kiln (inputs are new placeholders)")
    layer = InputLayer(shape=shape, batch_size=batch_size, dtype=dtype, batch_shape=batch_shape,
                       name=name, sparse=sparse, ragged=ragged, optional=optional)
    return layer.output
