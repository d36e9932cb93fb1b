"""Reshaping layers: Flatten, Reshape, Permute, RepeatVector, ZeroPadding1D, ZeroPadding2D,
UpSampling1D, UpSampling2D, Cropping1D, Cropping2D."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node, format_shape
from kiln.layers._utils import check_static, normalize_data_format, normalize_tuple, positive_int
from kiln.layers.base import Layer, check_rank


class Flatten(Layer):
    """Flattens each sample: ``(batch, d1, d2, ...)`` -> ``(batch, d1 * d2 * ...)``.

    A rank-1 input ``(batch,)`` becomes ``(batch, 1)``. The non-batch dimensions must be
    known.

    Args:
        data_format: ``None``, ``"channels_last"`` or ``"channels_first"`` (transposed to
            channels-last before flattening, as Keras does).

    Example:
        >>> kiln.layers.Flatten()(kiln.Input((28, 28, 1))).shape
        (None, 784)
    """

    def __init__(self, data_format: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.data_format = normalize_data_format("Flatten", data_format, channels_first=True)

    def call(self, inputs: Node) -> Node:
        check_static(self, inputs, range(1, inputs.ndim), "size for every non-batch dimension")
        size = int(np.prod(inputs.shape[1:], dtype=np.int64))
        return K.reshape(inputs, (-1, size))

    def get_config(self) -> dict:
        config = super().get_config()
        config["data_format"] = self.data_format
        return config


class Reshape(Layer):
    """Reshapes each sample to ``target_shape`` (the batch dimension is kept).

    Args:
        target_shape: the new shape of one sample; one entry may be -1 (inferred).

    Example:
        >>> kiln.layers.Reshape((7, 7, 16))(kiln.Input((784,))).shape
        (None, 7, 7, 16)
    """

    def __init__(self, target_shape: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self.target_shape = tuple(int(d) for d in target_shape)
        if sum(1 for d in self.target_shape if d == -1) > 1 or any(
                d < -1 or d == 0 for d in self.target_shape):
            raise ValueError(f"Reshape: target_shape must be positive ints with at most one -1, "
                             f"received {self.target_shape}")

    def _resolve(self, x: Node) -> tuple[int, ...]:
        target = self.target_shape
        sample = x.shape[1:]
        known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
        if any(d is None for d in sample):
            if -1 in target:
                raise ValueError(f"Layer '{self.name}' (Reshape): cannot infer the -1 in "
                                 f"target_shape {target} from input shape {format_shape(x.shape)} "
                                 "with unknown dimensions")
            return target
        size = int(np.prod(sample, dtype=np.int64))
        if -1 in target:
            if known == 0 or size % known:
                raise ValueError(f"Layer '{self.name}' (Reshape): total size of the new array "
                                 f"must be unchanged, input_shape = {format_shape(x.shape)}, "
                                 f"target_shape = {target}")
            return tuple(size // known if d == -1 else d for d in target)
        if known != size:
            raise ValueError(f"Layer '{self.name}' (Reshape): total size of the new array must "
                             f"be unchanged, input_shape = {format_shape(x.shape)} ({size} values "
                             f"per sample), target_shape = {target} ({known} values)")
        return target

    def call(self, inputs: Node) -> Node:
        return K.reshape(inputs, (-1,) + self._resolve(inputs))

    def get_config(self) -> dict:
        config = super().get_config()
        config["target_shape"] = self.target_shape
        return config


class Permute(Layer):
    """Permutes the non-batch axes; ``dims`` is 1-indexed, like Keras.

    Args:
        dims: a permutation of ``1..rank-1``, e.g. ``(2, 1)`` swaps the two sample axes.

    Example:
        >>> kiln.layers.Permute((2, 1))(kiln.Input((10, 64))).shape
        (None, 64, 10)
    """

    def __init__(self, dims: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self.dims = tuple(int(d) for d in dims)
        if sorted(self.dims) != list(range(1, len(self.dims) + 1)):
            raise ValueError(f"Permute: dims must be a permutation of 1..{len(self.dims)} "
                             f"(1-indexed, the batch axis excluded), received dims={self.dims}")

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, len(self.dims) + 1)

    def call(self, inputs: Node) -> Node:
        return K.transpose(inputs, (0,) + self.dims)

    def get_config(self) -> dict:
        config = super().get_config()
        config["dims"] = self.dims
        return config


class RepeatVector(Layer):
    """Repeats a vector ``n`` times: ``(batch, features)`` -> ``(batch, n, features)``.

    Args:
        n: the number of repetitions.
    """

    def __init__(self, n: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.n = positive_int("RepeatVector", "n", n)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, 2)

    def call(self, inputs: Node) -> Node:
        row = K.expand_dims(inputs, 1)
        return K.concatenate([row] * self.n, axis=1)

    def get_config(self) -> dict:
        config = super().get_config()
        config["n"] = self.n
        return config


class ZeroPadding2D(Layer):
    """Pads images with zeros: ``(batch, h, w, c)`` -> ``(batch, h + top + bottom,
    w + left + right, c)``.

    Args:
        padding: an int (same on all sides), a pair ``(symmetric_h, symmetric_w)`` or
            ``((top, bottom), (left, right))``.
        data_format: ``None`` or ``"channels_last"``.
    """

    def __init__(self, padding: Any = (1, 1), data_format: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.data_format = normalize_data_format("ZeroPadding2D", data_format, channels_first=True)
        if isinstance(padding, int | np.integer):
            pads = ((int(padding),) * 2,) * 2
        elif len(padding) == 2 and all(isinstance(p, int | np.integer) for p in padding):
            pads = ((int(padding[0]),) * 2, (int(padding[1]),) * 2)
        elif len(padding) == 2:
            pads = tuple(normalize_tuple("ZeroPadding2D", p, 2, "padding", allow_zero=True)
                         for p in padding)
        else:
            raise ValueError(f"ZeroPadding2D: padding must be an int, a pair of ints or a pair "
                             f"of (before, after) pairs, received padding={padding!r}")
        if any(v < 0 for p in pads for v in p):
            raise ValueError(f"ZeroPadding2D: padding must be non-negative, received {padding!r}")
        self.padding = pads

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, 4)

    def call(self, inputs: Node) -> Node:
        (top, bottom), (left, right) = self.padding
        return K.pad(inputs, ((0, 0), (top, bottom), (left, right), (0, 0)))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"padding": self.padding, "data_format": self.data_format})
        return config


class UpSampling2D(Layer):
    """Upsamples rows and columns: ``(batch, h, w, c)`` -> ``(batch, h * size_h, w * size_w,
    c)``.

    ``"nearest"`` repeats each pixel (reshapes and concatenations: each input pixel gets the
    sum of the gradients of its copies); every other mode resizes with
    ``kiln.ops.image.resize`` to the upsampled size, as Keras does (half-pixel centers, the
    kernels of Keras' JAX/NumPy backends; ``"area"`` as TensorFlow's). All modes are linear in
    the image and differentiable.

    Args:
        size: an int or a pair ``(size_h, size_w)``.
        data_format: ``None``, ``"channels_last"`` or ``"channels_first"``.
        interpolation: ``"nearest"`` (default), ``"bilinear"``, ``"bicubic"``,
            ``"lanczos3"``, ``"lanczos5"`` or ``"area"`` (case-insensitive).

    Example:
        >>> kiln.layers.UpSampling2D(2, interpolation="bilinear")(kiln.Input((4, 4, 3))).shape
        (None, 8, 8, 3)
    """

    INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos3", "lanczos5", "area")

    def __init__(self, size: Any = (2, 2), data_format: str | None = None,
                 interpolation: str = "nearest", **kwargs: Any):
        super().__init__(**kwargs)
        self.size = normalize_tuple("UpSampling2D", size, 2, "size")
        self.data_format = normalize_data_format("UpSampling2D", data_format,
                                                 channels_first=True)
        mode = interpolation.lower() if isinstance(interpolation, str) else interpolation
        if mode not in self.INTERPOLATIONS:
            raise ValueError(f"UpSampling2D: interpolation must be one of "
                             f"{', '.join(map(repr, self.INTERPOLATIONS))}, received "
                             f"interpolation={interpolation!r}")
        self.interpolation = mode

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, 4)

    def call(self, inputs: Node) -> Node:
        if self.interpolation == "nearest" and None in inputs.shape[1:]:
            return repeat_axes(inputs, self.size)  # a run-time height or width
        check_static(self, inputs, (1, 2, 3), "height, width and channels")
        _, h, w, c = inputs.shape
        sh, sw = self.size
        if self.interpolation != "nearest":
            return K.image.resize(inputs, (h * sh, w * sw), interpolation=self.interpolation)
        x = K.reshape(inputs, (-1, h, 1, w, 1, c))
        if sh > 1:
            x = K.concatenate([x] * sh, axis=2)
        if sw > 1:
            x = K.concatenate([x] * sw, axis=4)
        return K.reshape(x, (-1, h * sh, w * sw, c))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"size": self.size, "data_format": self.data_format,
                       "interpolation": self.interpolation})
        return config


def repeat_axes(x: Node, sizes: tuple[int, ...]) -> Node:
    """Nearest-neighbour upsampling of the spatial axes ``1 .. len(sizes)`` (``ops.repeat``,
    as Keras writes it), for shapes known only at run time."""
    for axis, size in enumerate(sizes, start=1):
        if size > 1:
            x = K.repeat(x, size, axis=axis)
    return x


def _pair(who: str, arg: str, value: Any) -> tuple[int, int]:
    """An int (both sides) or a pair ``(before, after)`` of non-negative ints."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        out = (int(value),) * 2
    else:
        out = normalize_tuple(who, value, 2, arg, allow_zero=True)
    if min(out) < 0:
        raise ValueError(f"{who}: {arg} must be non-negative, received {arg}={value!r}")
    return out  # type: ignore[return-value]


class ZeroPadding1D(Layer):
    """Pads sequences with zeros along the steps: ``(batch, steps, c)`` -> ``(batch, left +
    steps + right, c)``.

    Args:
        padding: an int (both sides, default 1) or a pair ``(left, right)``.
        data_format: ``None`` or ``"channels_last"``.

    Example:
        >>> kiln.layers.ZeroPadding1D((1, 2))(kiln.Input((5, 3))).shape
        (None, 8, 3)
    """

    def __init__(self, padding: Any = 1, data_format: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.padding = _pair("ZeroPadding1D", "padding", padding)
        self.data_format = normalize_data_format("ZeroPadding1D", data_format, channels_first=True)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, 3)

    def call(self, inputs: Node) -> Node:
        return K.pad(inputs, ((0, 0), self.padding, (0, 0)))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"padding": self.padding, "data_format": self.data_format})
        return config


class UpSampling1D(Layer):
    """Repeats each step ``size`` times: ``(batch, steps, c)`` -> ``(batch, steps * size, c)``.

    Args:
        size: the number of repetitions (default 2).

    Example:
        >>> kiln.layers.UpSampling1D(3)(kiln.Input((4, 2))).shape
        (None, 12, 2)
    """

    def __init__(self, size: int = 2, **kwargs: Any):
        super().__init__(**kwargs)
        self.size = positive_int("UpSampling1D", "size", size)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, 3)

    def call(self, inputs: Node) -> Node:
        if None in inputs.shape[1:]:  # sequences of any length
            return repeat_axes(inputs, (self.size,))
        _, steps, c = inputs.shape
        x = K.reshape(inputs, (-1, steps, 1, c))
        if self.size > 1:
            x = K.concatenate([x] * self.size, axis=2)
        return K.reshape(x, (-1, steps * self.size, c))

    def get_config(self) -> dict:
        config = super().get_config()
        config["size"] = self.size
        return config


def _crop(layer: Layer, inputs: Node, crops: tuple[tuple[int, int], ...]) -> Node:
    spec: list[tuple[Any, Any, int]] = [(None, None, 1)]
    for i, (lo, hi) in enumerate(crops):
        n = inputs.shape[1 + i]
        if n is not None and lo + hi >= n:
            raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}): cropping "
                             f"{crops} leaves nothing of axis {1 + i} of the input of shape "
                             f"{format_shape(inputs.shape)}")
        if n is None and hi:
            raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}) needs a known size "
                             f"on axis {1 + i} to crop its end, received input shape "
                             f"{format_shape(inputs.shape)}")
        spec.append((lo, None if n is None else n - hi, 1))
    spec += [(None, None, 1)] * (inputs.ndim - 1 - len(crops))
    return K.slice(inputs, spec, None)


class Cropping1D(Layer):
    """Crops sequences along the steps: ``(batch, steps, c)`` -> ``(batch, steps - start -
    end, c)``.

    Args:
        cropping: an int (both ends) or a pair ``(start, end)`` (default ``(1, 1)``).

    Example:
        >>> kiln.layers.Cropping1D((1, 2))(kiln.Input((6, 3))).shape
        (None, 3, 3)
    """

    def __init__(self, cropping: Any = (1, 1), **kwargs: Any):
        super().__init__(**kwargs)
        self.cropping = _pair("Cropping1D", "cropping", cropping)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, 3)

    def call(self, inputs: Node) -> Node:
        return _crop(self, inputs, (self.cropping,))

    def get_config(self) -> dict:
        config = super().get_config()
        config["cropping"] = self.cropping
        return config


class Cropping2D(Layer):
    """Crops images: ``(batch, h, w, c)`` -> ``(batch, h - top - bottom, w - left - right,
    c)``.

    Args:
        cropping: an int (all sides), a pair ``(symmetric_h, symmetric_w)`` or
            ``((top, bottom), (left, right))`` (default no cropping).
        data_format: ``None`` or ``"channels_last"``.

    Example:
        >>> kiln.layers.Cropping2D(((1, 0), (2, 2)))(kiln.Input((8, 8, 3))).shape
        (None, 7, 4, 3)
    """

    def __init__(self, cropping: Any = ((0, 0), (0, 0)), data_format: str | None = None,
                 **kwargs: Any):
        super().__init__(**kwargs)
        who = "Cropping2D"
        self.data_format = normalize_data_format(who, data_format, channels_first=True)
        if isinstance(cropping, int | np.integer) and not isinstance(cropping, bool):
            crops = (_pair(who, "cropping", cropping),) * 2
        elif isinstance(cropping, list | tuple) and len(cropping) == 2:
            crops = tuple(_pair(who, "cropping", c) for c in cropping)
        else:
            raise ValueError(f"{who}: cropping must be an int, a pair of ints or a pair of "
                             f"(before, after) pairs, received cropping={cropping!r}")
        self.cropping = crops

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, 4)

    def call(self, inputs: Node) -> Node:
        return _crop(self, inputs, self.cropping)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"cropping": self.cropping, "data_format": self.data_format})
        return config
