"""Adafactor, Keras 3's rule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln import ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer, common_args
from kiln.optimizers.schedules import LearningRateSchedule


def _rms(x: Node) -> Node:
    return ops.sqrt(ops.mean(ops.square(x)))


class Adafactor(Optimizer):
    """Adafactor (Shazeer & Stern, 2018), in Keras 3's form. For a variable of rank >= 2 the
    second moment is factored over its last two axes (row means ``r``, column means ``c``);
    smaller variables keep a full ``velocity``::

        t = iterations + 1;  rho = min(lr, 1 / sqrt(t));  alpha = max(epsilon_2, rms(w)) * rho
        g2 = g**2 + epsilon_1;  beta = 1 - t**beta_2_decay
        r = beta * r + (1 - beta) * mean(g2, -1);  c = beta * c + (1 - beta) * mean(g2, -2)
        v = (r / mean(r, -1))[..., None] * c[..., None, :]     # rank < 2: v = EMA of g2
        u = g / sqrt(v);  w -= alpha * u / max(1, rms(u) / clip_threshold)

    Args:
        learning_rate: float, schedule or callable (0.001).
        beta_2_decay: decay exponent of the second-moment rate (-0.8).
        epsilon_1: added to the squared gradients (1e-30).
        epsilon_2: lower bound of the variable's RMS in the step size (1e-3).
        clip_threshold: threshold of the update's RMS clipping (1.0).
        relative_step: cap a constant learning rate by ``1 / sqrt(t)`` (True; Keras caps the
            step size by it in any case).
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.Adafactor(0.01)
    """

    _slot_groups = (("velocity",),)

    def __init__(self, learning_rate: Any = 0.001, beta_2_decay: float = -0.8,
                 epsilon_1: float = 1e-30, epsilon_2: float = 1e-3,
                 clip_threshold: float = 1.0, relative_step: bool = True,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None,
                 name: str | None = None, **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name or "adafactor",
                         **common_args(locals()), **kwargs)
        self.beta_2_decay = float(beta_2_decay)
        self.epsilon_1 = float(epsilon_1)
        self.epsilon_2 = float(epsilon_2)
        self.clip_threshold = float(clip_threshold)
        self.relative_step = bool(relative_step)

    def build(self, variables: Sequence[Variable]) -> None:
        """Creates ``velocity`` for every variable, plus the factored ``r`` (shape
        ``var.shape[:-1]``) and ``c`` (``var.shape[:-2] + var.shape[-1:]``) for those of
        rank >= 2."""
        variables = list(variables)
        new: list[Variable] = []
        for v in variables:
            if (isinstance(v, Variable) and id(v) not in self._var_index
                    and all(v is not n for n in new)):
                new.append(v)
        super().build(variables)
        for v in new:
            if len(v.shape) >= 2:
                self._factor_slot(v, "r", v.shape[:-1])
                self._factor_slot(v, "c", v.shape[:-2] + v.shape[-1:])

    def _factor_slot(self, var: Variable, slot: str, shape: tuple[int, ...]) -> None:
        name = f"{self.name}/{var.name.replace('/', '_')}_{slot}"
        s = Variable(np.zeros(shape, dtype=var.dtype), name=name, trainable=False,
                     dtype=var.dtype)
        self._slots[(id(var), slot)] = s
        self._slot_variables.append(s)

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        t = self.local_step(variable.dtype)
        inv_sqrt_t = 1.0 / ops.sqrt(t)
        lr = learning_rate
        scheduled = isinstance(self._learning_rate, LearningRateSchedule) or callable(
            self._learning_rate)
        if self.relative_step and not scheduled:
            lr = ops.minimum(lr, inv_sqrt_t)
        rho = ops.minimum(lr, inv_sqrt_t)
        alpha = ops.maximum(_rms(value), self.epsilon_2) * rho
        g2 = ops.square(gradient) + self.epsilon_1
        beta = 1.0 - ops.power(t, self.beta_2_decay)
        v_slot = self.get_slot(variable, "velocity")
        if len(variable.shape) >= 2:
            r_slot = self.get_slot(variable, "r")
            c_slot = self.get_slot(variable, "c")
            r = beta * convert_to_tensor(r_slot) + (1.0 - beta) * ops.mean(g2, axis=-1)
            c = beta * convert_to_tensor(c_slot) + (1.0 - beta) * ops.mean(g2, axis=-2)
            self.assign(r_slot, r)
            self.assign(c_slot, c)
            v = (ops.expand_dims(r / ops.mean(r, axis=-1, keepdims=True), -1)
                 * ops.expand_dims(c, -2))
        else:
            v = beta * convert_to_tensor(v_slot) + (1.0 - beta) * g2
        self.assign(v_slot, v)
        u = gradient / ops.sqrt(v)
        u = u / ops.maximum(_rms(u) / self.clip_threshold, 1.0)
        return value - alpha * u

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_2_decay": self.beta_2_decay,
                "epsilon_1": self.epsilon_1, "epsilon_2": self.epsilon_2,
                "clip_threshold": self.clip_threshold, "relative_step": self.relative_step}
