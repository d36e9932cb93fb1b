"""SGD with optional (Nesterov) momentum, Keras 3's rule."""

from __future__ import annotations

from typing import Any

from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer, common_args


class SGD(Optimizer):
    """Gradient descent, with momentum when ``momentum > 0``.

    Rule (Keras 3): without momentum ``w -= lr * g``; with momentum
    ``v = momentum * v - lr * g; w += v``; with ``nesterov=True``
    ``v = momentum * v - lr * g; w += momentum * v - lr * g``.

    Args:
        learning_rate: float, schedule or callable (0.01).
        momentum: float in [0, 1] (0.0).
        nesterov: use Nesterov momentum (False).
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.SGD(0.1, momentum=0.9, nesterov=True)
    """

    def __init__(self, learning_rate: Any = 0.01, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None,
                 name: str | None = None, **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name or "SGD", **common_args(locals()),
                         **kwargs)
        if isinstance(momentum, bool) or not isinstance(momentum, int | float) \
                or not 0 <= momentum <= 1:
            raise ValueError(f"SGD: `momentum` must be a float between [0, 1], received "
                             f"{momentum!r}")
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)

    def _active_slot_groups(self) -> list[tuple[str, ...]]:
        return [("momentum",)] if self.momentum != 0 else []

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        if self.momentum == 0:
            return value - gradient * learning_rate
        slot = self.get_slot(variable, "momentum")
        m = convert_to_tensor(slot) * self.momentum - gradient * learning_rate
        self.assign(slot, m)
        if self.nesterov:
            return value + (m * self.momentum - gradient * learning_rate)
        return value + m

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov}
