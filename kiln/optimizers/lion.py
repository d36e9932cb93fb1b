"""Lion, Keras 3's rule."""

from __future__ import annotations

from typing import Any

from kiln import ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer, common_args


class Lion(Optimizer):
    """Lion (Chen et al., 2023)::

        w -= lr * sign(beta_1 * m + (1 - beta_1) * g)
        m = beta_2 * m + (1 - beta_2) * g

    Args:
        learning_rate: float, schedule or callable (0.001); typically 3-10x smaller than
            AdamW's.
        beta_1: in (0, 1] (0.9).
        beta_2: (0.99).
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.Lion(1e-4, weight_decay=0.1)
    """

    _slot_groups = (("momentum",),)

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.99,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None,
                 name: str | None = None, **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name or "lion", **common_args(locals()),
                         **kwargs)
        if beta_1 <= 0 or beta_1 > 1:
            raise ValueError("Lion: argument `beta_1` must be in the [0, 1] range. Otherwise, "
                             f"the optimizer degenerates to SignSGD. Received: beta_1={beta_1}.")
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        m_slot = self.get_slot(variable, "momentum")
        m = convert_to_tensor(m_slot)
        direction = ops.sign(m * self.beta_1 + gradient * (1.0 - self.beta_1))
        self.assign(m_slot, m * self.beta_2 + gradient * (1.0 - self.beta_2))
        return value - learning_rate * direction

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2}
