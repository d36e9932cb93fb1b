"""RandomFourierFeatures: explicit random features of a shift-invariant kernel (tf.keras 2.x's
``tf.keras.layers.experimental.RandomFourierFeatures``; Keras 3 dropped it, keras.io's
"A Quasi-SVM in Keras" uses it).

Rahimi and Recht, "Random Features for Large-Scale Kernel Machines" (2007): with ``W`` drawn
from the kernel's spectral density (standard normal for the Gaussian kernel, standard Cauchy
for the Laplacian one) and ``b`` uniform in ``[0, 2 pi)``, the map
``phi(x) = sqrt(2 / D) * cos(x @ W / scale + b)`` has ``phi(x) . phi(y) ~ k(x - y)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import kiln.ops as K
from kiln import constraints, initializers
from kiln.core import Node, format_shape
from kiln.layers._utils import positive_int
from kiln.layers.base import Layer, check_rank

_KERNELS = ("gaussian", "laplacian")


class _RandomCauchy(initializers.RandomInitializer):
    """Standard Cauchy samples ``tan(pi * (u - 1/2))``, ``u`` uniform in (0, 1): the spectral
    density of the Laplacian kernel ``exp(-|x - y|_1)``."""

    def __call__(self, shape: Any, dtype: Any = None) -> np.ndarray:
        u = self._rng().uniform(0.0, 1.0, tuple(shape))
        return np.tan(np.pi * (u - 0.5)).astype(np.dtype(dtype or "float32"))


def _features_initializer(kernel_initializer: Any) -> Any:
    if isinstance(kernel_initializer, str):
        if kernel_initializer.lower() == "gaussian":
            return initializers.RandomNormal(stddev=1.0)
        return _RandomCauchy()
    return initializers.get(kernel_initializer)


class RandomFourierFeatures(Layer):
    """Projects ``(batch, d)`` inputs to ``(batch, output_dim)`` random Fourier features:
    ``sqrt(2 / output_dim) * cos(inputs @ (W / kernel_scale) + b)``.

    ``W`` (``unscaled_kernel``, ``(d, output_dim)``) and ``b`` (``bias``, uniform in
    ``[0, 2 pi)``) are never trained; ``kernel_scale`` (shape ``(1,)``, kept non-negative) is
    trained only when the layer is built with ``trainable=True``. The dot product of two
    feature vectors approximates the kernel ``exp(-|x - y|^2 / (2 scale^2))`` (``"gaussian"``)
    or ``exp(-|x - y|_1 / scale)`` (``"laplacian"``).

    Args:
        output_dim: the number of random features (a positive int).
        kernel_initializer: ``"gaussian"`` (default), ``"laplacian"``, or any initializer of
            ``W``.
        scale: the kernel's width; default ``sqrt(d / 2)`` for ``"gaussian"``, else 1.0.
        trainable: whether ``kernel_scale`` is trained (default False).

    Example:
        >>> rff = kiln.layers.RandomFourierFeatures(1024, scale=10.0)
        >>> rff(kiln.Input((784,))).shape
        (None, 1024)
    """

    def __init__(self, output_dim: int, kernel_initializer: Any = "gaussian",
                 scale: float | None = None, trainable: bool = False, name: str | None = None,
                 **kwargs: Any):
        cls = type(self).__name__
        positive_int(cls, "output_dim", output_dim)
        if isinstance(kernel_initializer, str) and kernel_initializer.lower() not in _KERNELS:
            raise ValueError(f"{cls}: unsupported kernel type {kernel_initializer!r}; supported "
                             f"kernel types: {list(_KERNELS)} (or an initializer object)")
        if scale is not None and not scale > 0.0:
            raise ValueError(f"{cls}: when provided, scale must be a positive float, received "
                             f"scale={scale!r}")
        super().__init__(trainable=trainable, name=name, **kwargs)
        self.output_dim = int(output_dim)
        self.kernel_initializer = kernel_initializer
        self.scale = scale

    def build(self, input_shape: Any) -> None:
        if len(input_shape) != 2 or input_shape[1] is None:
            raise ValueError(f"Layer '{self.name}' (RandomFourierFeatures) expects inputs of "
                             f"shape (batch, features) with a known number of features, "
                             f"received input shape {format_shape(input_shape)}")
        input_dim = int(input_shape[1])
        self.unscaled_kernel = self.add_weight(
            name="unscaled_kernel", shape=(input_dim, self.output_dim),
            initializer=_features_initializer(self.kernel_initializer), trainable=False)
        self.bias = self.add_weight(
            name="bias", shape=(self.output_dim,),
            initializer=initializers.RandomUniform(0.0, 2.0 * math.pi), trainable=False)
        scale = self.scale
        if scale is None:
            gaussian = (isinstance(self.kernel_initializer, str)
                        and self.kernel_initializer.lower() == "gaussian")
            scale = math.sqrt(input_dim / 2.0) if gaussian else 1.0
        self.kernel_scale = self.add_weight(
            name="kernel_scale", shape=(1,), initializer=initializers.Constant(float(scale)),
            trainable=True, constraint=constraints.NonNeg())
        self.built = True

    def call(self, inputs: Node) -> Node:
        inputs = K.cast(inputs, self.unscaled_kernel.dtype)
        if isinstance(inputs, Node):
            check_rank(self, inputs, 2)
        kernel = (1.0 / self.kernel_scale) * self.unscaled_kernel
        outputs = K.cos(K.matmul(inputs, kernel) + self.bias)
        return outputs * math.sqrt(2.0 / self.output_dim)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return (input_shape[0], self.output_dim)

    def get_config(self) -> dict:
        config = super().get_config()
        init = self.kernel_initializer
        config.update({
            "output_dim": self.output_dim,
            "kernel_initializer": init if isinstance(init, str) else initializers.serialize(init),
            "scale": self.scale,
        })
        return config
