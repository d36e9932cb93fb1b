"""SwapEMAWeights: evaluate (and optionally checkpoint) with the optimizer's EMA weights."""

from __future__ import annotations

from typing import Any

from kiln.callbacks.callback import Callback


class SwapEMAWeights(Callback):
    """Swaps the model's weights with the optimizer's exponential moving averages (an
    optimizer created with ``use_ema=True``) for evaluation, and swaps them back after.

    - ``on_test_begin`` / ``on_predict_begin``: the EMA weights go into the model;
      ``on_test_end`` / ``on_predict_end``: the trained weights come back (Keras 3.15 does not
      swap back after predict; kiln does, so that training goes on with its own weights).
    - ``swap_on_epoch=True``: the EMA weights are also in the model from ``on_epoch_end`` until
      the next ``on_epoch_begin`` (so that callbacks after this one, e.g.
      :class:`ModelCheckpoint`, see them); after the last epoch they stay, and the averages
      are set to them.

    The swap is in place (no copy is kept). Works through a ``LossScaleOptimizer`` and with a
    ``MultiOptimizer`` (its inner optimizers that use EMA).

    Args:
        swap_on_epoch: also swap at the end / start of every epoch (False).

    Raises:
        ValueError: when the model's optimizer does not use EMA.

    Example:
        >>> model.compile(optimizer=kiln.optimizers.SGD(use_ema=True), loss="mse")
        >>> model.fit(x, y, validation_split=0.2, callbacks=[SwapEMAWeights()])
    """

    def __init__(self, swap_on_epoch: bool = False):
        super().__init__()
        self.swap_on_epoch = bool(swap_on_epoch)
        self._ema_weights_in_model = False

    def _ema_optimizers(self) -> list[Any]:
        optimizer = getattr(self.model, "optimizer", None)
        optimizer = getattr(optimizer, "inner_optimizer", optimizer)
        inner = getattr(optimizer, "optimizers", None)
        if inner is not None:
            found = [o for o in inner if getattr(o, "use_ema", False)]
            if not found:
                raise ValueError("SwapEMAWeights must be used when at least one inner optimizer "
                                 "has `use_ema=True` set. Received a MultiOptimizer with all "
                                 "inner optimizers having `use_ema=False`.")
            return found
        if not getattr(optimizer, "use_ema", False):
            raise ValueError("SwapEMAWeights must be used when `use_ema=True` is set on the "
                             "optimizer. Received: use_ema="
                             f"{getattr(optimizer, 'use_ema', None)} (optimizer {optimizer!r})")
        return [optimizer]

    def _swap(self) -> None:
        for opt in self._ema_optimizers():
            if opt.built:
                opt.swap_ema_weights()

    def _finalize(self) -> None:
        for opt in self._ema_optimizers():
            for var in opt._trainable_variables:
                opt.get_slot(var, "average").assign(var.numpy())

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        if self.swap_on_epoch and self._ema_weights_in_model:
            self._swap()
            self._ema_weights_in_model = False

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.swap_on_epoch and not self._ema_weights_in_model:
            self._swap()
            self._ema_weights_in_model = True
            if epoch == self.params.get("epochs", 0) - 1:
                self._finalize()

    def on_test_begin(self, logs: dict | None = None) -> None:
        if not self._ema_weights_in_model:
            self._swap()
            self._ema_weights_in_model = True

    def on_test_end(self, logs: dict | None = None) -> None:
        if self._ema_weights_in_model:
            self._swap()
            self._ema_weights_in_model = False

    on_predict_begin = on_test_begin
    on_predict_end = on_test_end
