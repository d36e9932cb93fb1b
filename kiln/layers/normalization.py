"""Normalization layers: BatchNormalization, LayerNormalization."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln import distribution, initializers, regularizers
from kiln.core import Node, format_shape
from kiln.layers._utils import constraint_config, set_constraints
from kiln.layers.base import Layer
from kiln.layers.context import current, in_training


def _axes(layer: Layer, axis: Any, ndim: int) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= int(a) < ndim:
            raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}): axis {a} is out of "
                             f"range for an input of rank {ndim}")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}): repeated axis in "
                         f"{axis}")
    if 0 in out:
        raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}): cannot normalize over "
                         "the batch axis 0 with a per-feature parameter")
    return tuple(sorted(out))


def _param_shape(layer: Layer, input_shape: tuple, axes: tuple[int, ...]) -> tuple[int, ...]:
    dims = [input_shape[a] for a in axes]
    if any(d is None for d in dims):
        raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}) needs known sizes on "
                         f"axis {axes}, received input shape {format_shape(input_shape)}")
    return tuple(int(d) for d in dims)


def _broadcast(param: Any, ndim: int, axes: tuple[int, ...], shape: tuple[int, ...]) -> Node:
    """Reshapes a parameter of shape ``shape`` (over ``axes``) to broadcast against the
    input."""
    if axes == tuple(range(ndim - len(axes), ndim)):
        return K.reshape(param, shape) if len(shape) > 1 else param
    full = [1] * ndim
    for a, d in zip(axes, shape):
        full[a] = d
    return K.reshape(param, tuple(full))


class BatchNormalization(Layer):
    """Normalizes each feature with the batch's statistics in training and with moving
    statistics in inference; then scales by ``gamma`` and shifts by ``beta``.

    ``y = gamma * (x - mean) / sqrt(var + epsilon) + beta``, with ``mean`` and ``var``
    (biased) over every axis except ``axis``. In a training trace the moving statistics are
    updated in the same graph: ``moving = moving * momentum + batch_stat * (1 - momentum)``.
    A layer with ``trainable=False`` always runs in inference mode (as in Keras 3).

    Weights, in order: gamma, beta (trainable), moving_mean, moving_variance
    (non-trainable); gamma/beta are absent when ``scale``/``center`` is False.

    Args:
        axis: the feature axis (default -1, channels-last).
        momentum: of the moving averages (default 0.99).
        epsilon: added to the variance (default 1e-3).
        center: learn ``beta`` (default True).
        scale: learn ``gamma`` (default True).
        beta_initializer, gamma_initializer, moving_mean_initializer,
        moving_variance_initializer: defaults "zeros", "ones", "zeros", "ones".
        beta_regularizer, gamma_regularizer: optional penalties.

    Example:
        >>> y = kiln.layers.BatchNormalization()(kiln.layers.Conv2D(32, 3)(x))
    """

    supports_masking = True  # keeps the time axis: the mask passes through

    def __init__(self, axis: int = -1, momentum: float = 0.99, epsilon: float = 1e-3,
                 center: bool = True, scale: bool = True, beta_initializer: Any = "zeros",
                 gamma_initializer: Any = "ones", moving_mean_initializer: Any = "zeros",
                 moving_variance_initializer: Any = "ones", beta_regularizer: Any = None,
                 gamma_regularizer: Any = None, beta_constraint: Any = None,
                 gamma_constraint: Any = None, renorm: bool = False,
                 renorm_clipping: Any = None, renorm_momentum: float = 0.99,
                 synchronized: bool = False, **kwargs: Any):
        # renorm_momentum is only meaningful with renorm
        kwargs.update(renorm=renorm, renorm_clipping=renorm_clipping)
        for key in ("renorm", "renorm_clipping", "fused", "virtual_batch_size", "adjustment"):
            if kwargs.pop(key, None):
                raise ValueError(f"BatchNormalization: {key} is not supported by kiln")
        super().__init__(**kwargs)
        set_constraints(self, beta_constraint=beta_constraint,
                        gamma_constraint=gamma_constraint)
        if isinstance(axis, list | tuple):
            if len(axis) != 1:
                raise ValueError(f"BatchNormalization: axis must be one int, received {axis!r}")
            axis = axis[0]
        self.axis = int(axis)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self.synchronized = bool(synchronized)
        self.beta_initializer = initializers.get(beta_initializer)
        self.gamma_initializer = initializers.get(gamma_initializer)
        self.moving_mean_initializer = initializers.get(moving_mean_initializer)
        self.moving_variance_initializer = initializers.get(moving_variance_initializer)
        self.beta_regularizer = regularizers.get(beta_regularizer)
        self.gamma_regularizer = regularizers.get(gamma_regularizer)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            axes = _axes(self, self.axis, inputs.ndim)
            if self.built and inputs.shape[axes[0]] not in (None, self.moving_mean.shape[0]):
                raise ValueError(f"Input 0 of layer '{self.name}' is incompatible with the "
                                 f"layer: expected axis {self.axis} of input shape to have "
                                 f"value {self.moving_mean.shape[0]}, but received input with "
                                 f"shape {format_shape(inputs.shape)}")

    def build(self, input_shape: Any) -> None:
        axes = _axes(self, self.axis, len(input_shape))
        shape = _param_shape(self, input_shape, axes)
        self.gamma = self.beta = None
        if self.scale:
            self.gamma = self.add_weight("gamma", shape, self.gamma_initializer,
                                         self.gamma_regularizer)
        if self.center:
            self.beta = self.add_weight("beta", shape, self.beta_initializer,
                                        self.beta_regularizer)
        self.moving_mean = self.add_weight("moving_mean", shape, self.moving_mean_initializer,
                                           trainable=False)
        self.moving_variance = self.add_weight("moving_variance", shape,
                                               self.moving_variance_initializer, trainable=False)
        self.built = True

    def call(self, inputs: Node, training: bool | None = None) -> Node:
        ndim = inputs.ndim
        axes = _axes(self, self.axis, ndim)
        shape = tuple(self.moving_mean.shape)
        reduce_axes = tuple(a for a in range(ndim) if a not in axes)
        if in_training(training) and self.trainable:
            moments = self._synchronized_moments(inputs, reduce_axes)
            if moments is None:
                mean = K.mean(inputs, axis=reduce_axes, keepdims=True)
                var = K.mean(K.square(inputs - mean), axis=reduce_axes, keepdims=True)
            else:
                mean, var = moments
            m = self.momentum
            for var_, stat in ((self.moving_mean, mean), (self.moving_variance, var)):
                new = var_ * K.constant(m, var_.dtype) + \
                    K.reshape(stat, shape) * K.constant(1.0 - m, var_.dtype)
                self.add_update(var_, new)
        else:
            mean = _broadcast(self.moving_mean, ndim, axes, shape)
            var = _broadcast(self.moving_variance, ndim, axes, shape)
        inv = K.rsqrt(var + K.constant(self.epsilon, inputs.dtype))
        if self.gamma is not None:
            inv = inv * _broadcast(self.gamma, ndim, axes, shape)
        out = (inputs - mean) * inv
        if self.beta is not None:
            out = out + _broadcast(self.beta, ndim, axes, shape)
        return out

    def _synchronized_moments(self, inputs: Node, reduce_axes: tuple[int, ...]
                              ) -> tuple[Node, Node] | None:
        """With ``synchronized=True`` in a data-parallel step (kiln.distribution): the batch
        mean and variance over the GLOBAL batch, every rank's sums and counts added by
        ``allreduce`` (whose gradient is an allreduce: the backward pass is synchronized too).
        None otherwise (per-replica statistics, the Keras default)."""
        ctx = current()
        weight = None if ctx is None else ctx.replica_weight
        dist = distribution.active()
        if not self.synchronized or weight is None or dist is None:
            return None
        group = dist.group_name
        dtype = inputs.dtype
        active = K.cast(K.greater(weight, K.cast(0, weight.dtype)), dtype)  # 0: a padding row
        count = K.reshape(K.cast(K.size_of(inputs, axis=reduce_axes), dtype) * active, (1,))
        count = K.allreduce(count, group)
        total = K.sum(inputs, axis=reduce_axes, keepdims=True) * active
        mean = K.allreduce(total, group) / count
        square = K.sum(K.square(inputs - mean), axis=reduce_axes, keepdims=True) * active
        return mean, K.allreduce(square, group) / count

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "axis": self.axis,
            "momentum": self.momentum,
            "epsilon": self.epsilon,
            "center": self.center,
            "scale": self.scale,
            "beta_initializer": initializers.serialize(self.beta_initializer),
            "gamma_initializer": initializers.serialize(self.gamma_initializer),
            "moving_mean_initializer": initializers.serialize(self.moving_mean_initializer),
            "moving_variance_initializer": initializers.serialize(
                self.moving_variance_initializer),
            "beta_regularizer": regularizers.serialize(self.beta_regularizer),
            "gamma_regularizer": regularizers.serialize(self.gamma_regularizer),
            **constraint_config(self, "beta_constraint", "gamma_constraint"),
            "synchronized": self.synchronized,
            "renorm": False,
            "renorm_clipping": None,
            "renorm_momentum": 0.99,
        })
        return config


class LayerNormalization(Layer):
    """Normalizes each sample over ``axis`` (by default its features), then scales by
    ``gamma`` and shifts by ``beta``: ``y = gamma * (x - mean) / sqrt(var + epsilon) + beta``.

    The statistics are per sample, so training and inference behave the same.

    Args:
        axis: int or list of ints, the normalized axes (default -1).
        epsilon: added to the variance (default 1e-3).
        center: learn ``beta`` (default True).
        scale: learn ``gamma`` (default True).
        rms_scaling: if True, ``y = gamma * x / sqrt(mean(x^2) + epsilon)`` (RMS normalization;
            ``center`` and ``scale`` are ignored, as in Keras).
        beta_initializer, gamma_initializer: defaults "zeros", "ones".
        beta_regularizer, gamma_regularizer: optional penalties.

    Example:
        >>> y = kiln.layers.LayerNormalization()(x)
    """

    supports_masking = True  # keeps the time axis: the mask passes through

    def __init__(self, axis: Any = -1, epsilon: float = 1e-3, center: bool = True,
                 scale: bool = True, beta_initializer: Any = "zeros",
                 gamma_initializer: Any = "ones", beta_regularizer: Any = None,
                 gamma_regularizer: Any = None, beta_constraint: Any = None,
                 gamma_constraint: Any = None, *, rms_scaling: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        set_constraints(self, beta_constraint=beta_constraint,
                        gamma_constraint=gamma_constraint)
        self.axis = int(axis) if isinstance(axis, int) else [int(a) for a in axis]
        self.epsilon = float(epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self.rms_scaling = bool(rms_scaling)
        self.beta_initializer = initializers.get(beta_initializer)
        self.gamma_initializer = initializers.get(gamma_initializer)
        self.beta_regularizer = regularizers.get(beta_regularizer)
        self.gamma_regularizer = regularizers.get(gamma_regularizer)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            axes = _axes(self, self.axis, inputs.ndim)
            if self.built:
                want = self._param_shape
                got = tuple(inputs.shape[a] for a in axes)
                if any(g is not None and g != w for g, w in zip(got, want)):
                    raise ValueError(f"Input 0 of layer '{self.name}' is incompatible with the "
                                     f"layer: expected size {want} on axis {self.axis}, but "
                                     f"received input with shape {format_shape(inputs.shape)}")

    def build(self, input_shape: Any) -> None:
        axes = _axes(self, self.axis, len(input_shape))
        self._param_shape = _param_shape(self, input_shape, axes)
        self.gamma = self.beta = None
        if self.scale or self.rms_scaling:
            self.gamma = self.add_weight("gamma", self._param_shape, self.gamma_initializer,
                                         self.gamma_regularizer)
        if self.center and not self.rms_scaling:
            self.beta = self.add_weight("beta", self._param_shape, self.beta_initializer,
                                        self.beta_regularizer)
        self.built = True

    def call(self, inputs: Node) -> Node:
        ndim = inputs.ndim
        axes = _axes(self, self.axis, ndim)
        eps = K.constant(self.epsilon, inputs.dtype)
        if self.rms_scaling:
            out = inputs * K.rsqrt(K.mean(K.square(inputs), axis=axes, keepdims=True) + eps)
        else:
            mean = K.mean(inputs, axis=axes, keepdims=True)
            centered = inputs - mean
            var = K.mean(K.square(centered), axis=axes, keepdims=True)
            out = centered * K.rsqrt(var + eps)
        if self.gamma is not None:
            out = out * _broadcast(self.gamma, ndim, axes, self._param_shape)
        if self.beta is not None:
            out = out + _broadcast(self.beta, ndim, axes, self._param_shape)
        return out

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "axis": self.axis,
            "epsilon": self.epsilon,
            "center": self.center,
            "scale": self.scale,
            "rms_scaling": self.rms_scaling,
            "beta_initializer": initializers.serialize(self.beta_initializer),
            "gamma_initializer": initializers.serialize(self.gamma_initializer),
            "beta_regularizer": regularizers.serialize(self.beta_regularizer),
            "gamma_regularizer": regularizers.serialize(self.gamma_regularizer),
            **constraint_config(self, "beta_constraint", "gamma_constraint"),
        })
        return config
