"""Keras' ``InputSpec``: the rank, dtype and axis sizes a layer accepts. A layer that sets
``self.input_spec`` (one spec, or a list, one per input) has its symbolic inputs checked
before ``build`` and ``call``, with Keras' error messages."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core import format_shape


class InputSpec:
    """The rank, dtype and axis sizes of a layer's input (Keras' ``InputSpec``).

    Args:
        dtype: the expected dtype, or None.
        shape: the expected shape (None entries match any size); sets ``ndim``.
        ndim, max_ndim, min_ndim: the expected rank, or its bounds.
        axes: ``{axis: size}`` the input must have.
        allow_last_axis_squeeze: accept a rank one off when the last axis is 1.
        name: the input's name.
        optional: whether the input may be None.

    Example:
        >>> spec = kiln.layers.InputSpec(ndim=4, axes={-1: 3})
    """

    def __init__(self, dtype: Any = None, shape: Any = None, ndim: int | None = None,
                 max_ndim: int | None = None, min_ndim: int | None = None, axes: Any = None,
                 allow_last_axis_squeeze: bool = False, name: str | None = None,
                 optional: bool = False):
        self.dtype = None if dtype is None else np.dtype(dtype).name
        if shape is not None:
            self.shape: tuple | None = tuple(None if d is None else int(d) for d in shape)
            self.ndim: int | None = len(self.shape)
        else:
            self.shape, self.ndim = None, ndim
        self.max_ndim, self.min_ndim = max_ndim, min_ndim
        self.name, self.optional = name, bool(optional)
        self.allow_last_axis_squeeze = bool(allow_last_axis_squeeze)
        try:
            axes = axes or {}
            self.axes = {int(k): axes[k] for k in axes}
        except (ValueError, TypeError):
            raise TypeError("Argument `axes` must be a dict with integer keys. "
                            f"Received: axes={axes}") from None
        if self.axes and (self.ndim is not None or self.max_ndim is not None):
            max_dim = (self.ndim if self.ndim else self.max_ndim) - 1
            if max(self.axes) > max_dim:
                raise ValueError(f"Axis {max(self.axes)} is greater than the maximum allowed "
                                 f"value: {max_dim}")

    def __repr__(self) -> str:
        parts = [f"{k}={v}" for k, v in (("dtype", self.dtype), ("shape", self.shape),
                                         ("ndim", self.ndim), ("max_ndim", self.max_ndim),
                                         ("min_ndim", self.min_ndim), ("axes", self.axes)) if v]
        return f"InputSpec({', '.join(parts)})"

    def get_config(self) -> dict:
        return {"dtype": self.dtype, "shape": self.shape, "ndim": self.ndim,
                "max_ndim": self.max_ndim, "min_ndim": self.min_ndim, "axes": self.axes,
                "optional": self.optional}

    @classmethod
    def from_config(cls, config: dict) -> InputSpec:
        return cls(**config)


def assert_input_compatibility(input_spec: Any, inputs: Any, layer_name: str) -> None:
    """Raises ValueError (Keras' wording) when ``inputs`` do not match ``input_spec``."""
    if input_spec is None:
        return
    specs = list(input_spec) if isinstance(input_spec, list | tuple) else [input_spec]
    xs = list(inputs) if isinstance(inputs, list | tuple) else [inputs]
    if len(xs) != len(specs):
        raise ValueError(f'Layer "{layer_name}" expects {len(specs)} input(s), but it '
                         f"received {len(xs)} input tensors.")
    for i, (spec, x) in enumerate(zip(specs, xs)):
        if spec is None or (x is None and spec.optional):
            continue
        shape = tuple(getattr(x, "shape", np.shape(x)))
        ndim = len(shape)
        head = f'Input {i} of layer "{layer_name}" is incompatible with the layer: '
        if spec.ndim is not None and not spec.allow_last_axis_squeeze and ndim != spec.ndim:
            raise ValueError(f"{head}expected ndim={spec.ndim}, found ndim={ndim}. Full shape "
                             f"received: {format_shape(shape)}")
        if spec.max_ndim is not None and ndim > spec.max_ndim:
            raise ValueError(f"{head}expected max_ndim={spec.max_ndim}, found ndim={ndim}")
        if spec.min_ndim is not None and ndim < spec.min_ndim:
            raise ValueError(f"{head}expected min_ndim={spec.min_ndim}, found ndim={ndim}. "
                             f"Full shape received: {format_shape(shape)}")
        dtype = getattr(x, "dtype", None)
        if spec.dtype is not None and dtype is not None and np.dtype(dtype).name != spec.dtype:
            raise ValueError(f"{head}expected dtype={spec.dtype}, found dtype={dtype}")
        for axis, value in spec.axes.items():
            if value is not None and -ndim <= axis < ndim and shape[axis] not in (value, None):
                raise ValueError(f"{head}expected axis {axis} of input shape to have value "
                                 f"{value}, but received input with shape "
                                 f"{format_shape(shape)}")
        if spec.shape is not None and len(spec.shape) == ndim:
            for want, got in zip(spec.shape, shape):
                if want is not None and got is not None and want != got:
                    raise ValueError(f"{head}expected shape={spec.shape}, found shape="
                                     f"{format_shape(shape)}")
