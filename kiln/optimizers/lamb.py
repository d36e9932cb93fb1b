"""LAMB, Keras 3's rule."""

from __future__ import annotations

from typing import Any

from kiln import ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer, _const, common_args


class Lamb(Optimizer):
    """LAMB (You et al., 2019): Adam's direction, rescaled per variable by the trust ratio
    ``||w|| / ||update||`` (1 where either norm is 0)::

        m += (g - m) * (1 - beta_1);  v += (g**2 - v) * (1 - beta_2)
        u = (m / (1 - beta_1**t)) / (sqrt(v / (1 - beta_2**t)) + epsilon)
        w -= ratio * lr * u

    Args:
        learning_rate: float, schedule or callable (0.001).
        beta_1: decay of the first moment (0.9).
        beta_2: decay of the second moment (0.999).
        epsilon: added to the root of the second moment (1e-7).
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.Lamb(1e-3, weight_decay=0.01)
    """

    _slot_groups = (("momentum", "velocity"),)

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, weight_decay: Any = None, clipnorm: Any = None,
                 clipvalue: Any = None, global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None,
                 name: str | None = None, **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name or "lamb",
                         **common_args(locals()), **kwargs)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        dtype = variable.dtype
        t = self.local_step(dtype)
        beta_1_power = ops.pow(_const(self.beta_1, dtype), t)
        beta_2_power = ops.pow(_const(self.beta_2, dtype), t)
        m_slot = self.get_slot(variable, "momentum")
        v_slot = self.get_slot(variable, "velocity")
        m = convert_to_tensor(m_slot)
        v = convert_to_tensor(v_slot)
        m = m + (gradient - m) * (1 - self.beta_1)
        v = v + (ops.square(gradient) - v) * (1 - self.beta_2)
        self.assign(m_slot, m)
        self.assign(v_slot, v)
        update = (m / (1.0 - beta_1_power)) / (ops.sqrt(v / (1.0 - beta_2_power)) + self.epsilon)
        w_norm = ops.sqrt(ops.sum(ops.square(value)))
        u_norm = ops.sqrt(ops.sum(ops.square(update)))
        one = _const(1.0, dtype)
        # where() picks, so the 0/0 of the branch not taken never reaches the result
        ratio = ops.where(ops.greater(w_norm, 0.0),
                          ops.where(ops.greater(u_norm, 0.0), w_norm / u_norm, one), one)
        return value - ratio * learning_rate * update

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2,
                "epsilon": self.epsilon}
