"""Nadam, Keras 3's rule."""

from __future__ import annotations

from typing import Any

from kiln import ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer, _const, common_args


class Nadam(Optimizer):
    """Nadam (Dozat): Adam with Nesterov momentum, Keras 3's form with the momentum schedule
    ``u_t = beta_1 * (1 - 0.5 * 0.96**t)`` and its running product (a slot ``u_product``,
    created after the per-variable slots)::

        u_product *= u_t                                    (once per step)
        m += (g - m) * (1 - beta_1);  v += (g**2 - v) * (1 - beta_2)
        m_hat = u_{t+1} * m / (1 - u_product * u_{t+1}) + (1 - u_t) * g / (1 - u_product)
        v_hat = v / (1 - beta_2**t)
        w -= lr * m_hat / (sqrt(v_hat) + epsilon)

    Args:
        learning_rate: float, schedule or callable (0.001).
        beta_1: (0.9). beta_2: (0.999). epsilon: (1e-7).
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.Nadam(1e-3)
    """

    _slot_groups = (("momentum", "velocity"),)

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None,
                 name: str | None = None, **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name or "nadam", **common_args(locals()),
                         **kwargs)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self._u_product: Variable | None = None
        self._u_product_new: Node | None = None

    def _build_extra(self, variables: list[Variable]) -> None:
        dtype = variables[0].dtype if variables else "float32"
        self._u_product = self.add_variable((), 1.0, dtype, "u_product")

    def _before_update_steps(self, variables: list[Variable]) -> None:
        assert self._u_product is not None
        dtype = self._u_product.dtype
        t = self.local_step(dtype)
        self._u_product_new = (convert_to_tensor(self._u_product) * self.beta_1
                               * (1.0 - 0.5 * ops.pow(_const(0.96, dtype), t)))
        self.assign(self._u_product, self._u_product_new)

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        dtype = variable.dtype
        t = self.local_step(dtype)
        decay = _const(0.96, dtype)
        u_t = (1.0 - 0.5 * ops.pow(decay, t)) * self.beta_1
        u_t_1 = (1.0 - 0.5 * ops.pow(decay, t + 1.0)) * self.beta_1
        assert self._u_product_new is not None
        u_product_t = ops.cast(self._u_product_new, dtype)
        u_product_t_1 = u_product_t * u_t_1
        beta_2_power = ops.pow(_const(self.beta_2, dtype), t)
        m_slot = self.get_slot(variable, "momentum")
        v_slot = self.get_slot(variable, "velocity")
        m = convert_to_tensor(m_slot)
        v = convert_to_tensor(v_slot)
        m = m + (gradient - m) * (1 - self.beta_1)
        v = v + (ops.square(gradient) - v) * (1 - self.beta_2)
        self.assign(m_slot, m)
        self.assign(v_slot, v)
        m_hat = u_t_1 * m / (1.0 - u_product_t_1) + (1.0 - u_t) * gradient / (1.0 - u_product_t)
        v_hat = v / (1.0 - beta_2_power)
        return value - m_hat * learning_rate / (ops.sqrt(v_hat) + self.epsilon)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2,
                "epsilon": self.epsilon}
