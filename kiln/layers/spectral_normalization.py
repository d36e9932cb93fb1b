"""SpectralNormalization: a wrapper that divides a layer's kernel by its largest singular
value (estimated by power iteration), as Keras'."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln import initializers
from kiln.core import Node
from kiln.layers.context import in_training
from kiln.layers.wrapper import Wrapper


def _l2_normalize(x: Node) -> Node:
    return x * K.rsqrt(K.maximum(K.sum(K.square(x)), K.constant(1e-12, x.dtype)))


class SpectralNormalization(Wrapper):
    """Spectral normalization of a layer's ``kernel`` (or ``embeddings``): the layer runs with
    ``kernel / sigma``, ``sigma`` the largest singular value of the kernel reshaped to ``(-1,
    last axis)``, estimated by ``power_iterations`` steps of power iteration from the
    non-trainable ``vector_u (1, last axis)`` (Keras' ``SpectralNormalization``). In training
    ``vector_u`` is updated to the new estimate and the gradient flows through ``kernel /
    sigma`` (``u`` and ``v`` held constant, as Keras). Outside training the layer also runs
    with ``kernel / sigma`` from the stored ``vector_u`` (Keras' TensorFlow backend stores the
    normalized kernel; kiln keeps the kernel and normalizes on the fly, so ``predict`` sees
    what training saw). A kernel of zeros is used as is.

    Args:
        layer: the wrapped layer (with a ``kernel`` or ``embeddings`` weight).
        power_iterations: power-iteration steps per call (default 1).

    Example:
        >>> sn = kiln.layers.SpectralNormalization(kiln.layers.Conv2D(64, 3))
    """

    def __init__(self, layer: Any, power_iterations: int = 1, **kwargs: Any):
        super().__init__(layer, **kwargs)
        if isinstance(power_iterations, bool) or not isinstance(power_iterations, int) or \
                power_iterations <= 0:
            raise ValueError("`power_iterations` should be greater than zero. Received: "
                             f"`power_iterations={power_iterations!r}`")
        self.power_iterations = int(power_iterations)

    def build(self, input_shape: Any) -> None:
        super().build(input_shape)
        self._attr = next((a for a in ("kernel", "embeddings")
                           if getattr(self.layer, a, None) is not None), None)
        if self._attr is None:
            raise ValueError(f"{type(self.layer).__name__} object has no attribute 'kernel' "
                             "nor 'embeddings'")
        kernel = getattr(self.layer, self._attr)
        self.vector_u = self.add_weight(
            "vector_u", (1, int(kernel.shape[-1])),
            initializers.TruncatedNormal(stddev=0.02), trainable=False)
        # Keras tracks the wrapped kernel as this layer's own too (``self.kernel =
        # layer.kernel``): its files hold it in this layer's vars, before vector_u
        self._weights.insert(0, kernel)
        self.built = True

    def normalized_weights(self) -> tuple[Node, Node]:
        """``(new vector_u, kernel / sigma)`` (Keras' method)."""
        kernel = getattr(self.layer, self._attr)
        w = K.reshape(kernel, (-1, int(kernel.shape[-1])))
        u = v = self.vector_u
        for _ in range(self.power_iterations):
            v = _l2_normalize(K.matmul(u, K.transpose(w)))
            u = _l2_normalize(K.matmul(v, w))
        u, v = K.stop_gradient(u), K.stop_gradient(v)
        sigma = K.matmul(K.matmul(v, w), K.transpose(u))  # (1, 1)
        zero = K.constant(0.0, kernel.dtype)
        safe = K.where(K.equal(sigma, zero), K.constant(1.0, kernel.dtype), sigma)
        return u, kernel / K.reshape(safe, ())

    def call(self, inputs: Node, training: Any = None) -> Any:
        u, kernel = self.normalized_weights()
        if in_training(training):
            self.add_update(self.vector_u, u)
        raw = getattr(self.layer, self._attr)
        setattr(self.layer, self._attr, kernel)
        try:
            return super().call(inputs, training=training)
        finally:
            setattr(self.layer, self._attr, raw)

    def get_config(self) -> dict:
        config = super().get_config()
        config["power_iterations"] = self.power_iterations
        return config
