"""More normalization layers (Keras 3's arguments, defaults and weights): UnitNormalization,
GroupNormalization."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln import initializers, regularizers
from kiln.core import Node, format_shape
from kiln.layers._utils import check_static, constraint_config, set_constraints
from kiln.layers.base import Layer


class UnitNormalization(Layer):
    """Scales each sample to unit L2 norm along ``axis``: ``x / sqrt(max(sum(x**2), 1e-12))``.

    Args:
        axis: an int or a list of ints (default -1).

    Example:
        >>> y = kiln.layers.UnitNormalization()(x)     # each row has norm 1
    """

    supports_masking = True

    def __init__(self, axis: Any = -1, **kwargs: Any):
        super().__init__(**kwargs)
        self.axis = int(axis) if isinstance(axis, int) else [int(a) for a in axis]

    def call(self, inputs: Node) -> Node:
        axes = (self.axis,) if isinstance(self.axis, int) else tuple(self.axis)
        for a in axes:
            if not -inputs.ndim <= a < inputs.ndim:
                raise ValueError(f"Layer '{self.name}' (UnitNormalization): axis {self.axis} is "
                                 f"out of range for input of shape {format_shape(inputs.shape)}")
        square_sum = K.sum(K.square(inputs), axis=axes, keepdims=True)
        return inputs * K.rsqrt(K.maximum(square_sum, K.constant(1e-12, inputs.dtype)))

    def get_config(self) -> dict:
        config = super().get_config()
        config["axis"] = self.axis
        return config


class GroupNormalization(Layer):
    """Group normalization: the channels along ``axis`` split into ``groups`` consecutive
    groups; each sample is normalized with the mean and (biased) variance of each group over
    all its other axes, then scaled by ``gamma`` and shifted by ``beta`` (one per channel).

    Weights, in order: gamma (if ``scale``), beta (if ``center``), both of shape
    ``(channels,)``.

    Args:
        groups: number of groups (default 32); -1 means one group per channel (instance
            normalization). Must divide the number of channels.
        axis: the channels axis (default -1).
        epsilon: added to the variance (default 1e-3).
        center, scale: whether to use beta and gamma (default True).
        beta_initializer, gamma_initializer: default "zeros" and "ones".
        beta_regularizer, gamma_regularizer: optional penalties.
        beta_constraint, gamma_constraint: optional constraints (``kiln.constraints``).

    Example:
        >>> y = kiln.layers.GroupNormalization(groups=4)(kiln.Input((8, 8, 16)))
    """

    supports_masking = True

    def __init__(self, groups: int = 32, axis: int = -1, epsilon: float = 1e-3,
                 center: bool = True, scale: bool = True, beta_initializer: Any = "zeros",
                 gamma_initializer: Any = "ones", beta_regularizer: Any = None,
                 gamma_regularizer: Any = None, beta_constraint: Any = None,
                 gamma_constraint: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        set_constraints(self, beta_constraint=beta_constraint,
                        gamma_constraint=gamma_constraint)
        if isinstance(groups, bool) or not isinstance(groups, int) or (groups < 1
                                                                          and groups != -1):
            raise ValueError(f"GroupNormalization: groups must be a positive int or -1, "
                             f"received groups={groups!r}")
        self.groups = int(groups)
        self.axis = int(axis)
        self.epsilon = float(epsilon)
        self.center = bool(center)
        self.scale = bool(scale)
        self.beta_initializer = initializers.get(beta_initializer)
        self.gamma_initializer = initializers.get(gamma_initializer)
        self.beta_regularizer = regularizers.get(beta_regularizer)
        self.gamma_regularizer = regularizers.get(gamma_regularizer)

    def _axis(self, ndim: int, shape: Any) -> int:
        if not -ndim <= self.axis < ndim or self.axis % ndim == 0:
            raise ValueError(f"Layer '{self.name}' (GroupNormalization): axis {self.axis} is not "
                             f"a non-batch axis of an input of shape {format_shape(shape)}")
        return self.axis % ndim

    def build(self, input_shape: Any) -> None:
        axis = self._axis(len(input_shape), input_shape)
        dim = input_shape[axis]
        if dim is None:
            raise ValueError(f"Layer '{self.name}' (GroupNormalization): axis {self.axis} of the "
                             f"input shape {format_shape(input_shape)} must have a known size")
        if self.groups == -1:
            self.groups = int(dim)
        if dim < self.groups:
            raise ValueError(f"Layer '{self.name}' (GroupNormalization): number of groups "
                             f"({self.groups}) cannot be more than the number of channels "
                             f"({dim}), input shape {format_shape(input_shape)}")
        if dim % self.groups:
            raise ValueError(f"Layer '{self.name}' (GroupNormalization): number of groups "
                             f"({self.groups}) must divide the number of channels ({dim}), "
                             f"input shape {format_shape(input_shape)}")
        self.gamma = self.beta = None
        if self.scale:
            self.gamma = self.add_weight("gamma", (dim,), self.gamma_initializer,
                                         self.gamma_regularizer)
        if self.center:
            self.beta = self.add_weight("beta", (dim,), self.beta_initializer,
                                        self.beta_regularizer)
        self.built = True

    def call(self, inputs: Node) -> Node:
        ndim = inputs.ndim
        axis = self._axis(ndim, inputs.shape)
        check_static(self, inputs, range(1, ndim), "size for every non-batch dimension")
        shape = tuple(inputs.shape[1:])
        dim = shape[axis - 1]
        grouped = shape[:axis - 1] + (self.groups, dim // self.groups) + shape[axis:]
        x = K.reshape(inputs, (-1,) + grouped)
        # statistics over every axis of the grouped tensor except the batch and the group axis
        red = tuple(a for a in range(1, ndim + 1) if a != axis)
        mean = K.mean(x, axis=red, keepdims=True)
        centered = x - mean
        var = K.mean(K.square(centered), axis=red, keepdims=True)
        out = K.reshape(centered * K.rsqrt(var + K.constant(self.epsilon, x.dtype)),
                        (-1,) + shape)
        param = (dim,) + (1,) * (ndim - 1 - axis)
        if self.gamma is not None:
            out = out * K.reshape(self.gamma, param)
        if self.beta is not None:
            out = out + K.reshape(self.beta, param)
        return out

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "groups": self.groups,
            "axis": self.axis,
            "epsilon": self.epsilon,
            "center": self.center,
            "scale": self.scale,
            "beta_initializer": initializers.serialize(self.beta_initializer),
            "gamma_initializer": initializers.serialize(self.gamma_initializer),
            "beta_regularizer": regularizers.serialize(self.beta_regularizer),
            "gamma_regularizer": regularizers.serialize(self.gamma_regularizer),
            **constraint_config(self, "beta_constraint", "gamma_constraint"),
        })
        return config
