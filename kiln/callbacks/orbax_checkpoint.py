"""OrbaxCheckpoint: Keras 3.15's checkpoint callback on Orbax (needs ``orbax-checkpoint``)."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import numpy as np

from kiln.callbacks._monitor import check_mode, infer_mode
from kiln.callbacks.callback import Callback


def _import_orbax() -> Any:
    try:
        import orbax.checkpoint as checkpoint

        ocp = checkpoint.v1  # an attribute of the package, not an importable module path
    except (ImportError, AttributeError) as exc:
        raise ImportError("OrbaxCheckpoint requires the `orbax-checkpoint` package (its "
                          "`orbax.checkpoint.v1` API), which could not be imported "
                          f"({exc}). Install it with `pip install orbax-checkpoint`, or use "
                          "kiln.callbacks.ModelCheckpoint / BackupAndRestore, which need "
                          "nothing beyond kiln.") from exc
    return ocp


def _nested(variables: list[Any]) -> dict[str, Any]:
    """``{"dense": {"kernel": array}}`` from Variables named ``dense/kernel`` (the layout of
    Keras' ``model.get_state_tree``)."""
    tree: dict[str, Any] = {}
    for v in variables:
        parts = str(v.name).split("/")
        node = tree
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        value = np.asarray(v.numpy())
        node[parts[-1]] = value.item() if value.ndim == 0 else value
    return tree


def state_tree(model: Any, weights_only: bool = False) -> dict[str, Any]:
    """The model's state as nested dicts of NumPy arrays: ``trainable_variables``,
    ``non_trainable_variables`` and (unless ``weights_only``) ``optimizer_variables``."""
    out = {"trainable_variables": _nested(list(model.trainable_weights)),
           "non_trainable_variables": _nested(list(model.non_trainable_weights))}
    opt = getattr(model, "optimizer", None)
    if not weights_only and opt is not None and getattr(opt, "built", False):
        out["optimizer_variables"] = _nested(list(opt.variables))
    return out


class OrbaxCheckpoint(Callback):
    """Saves the model's state (weights, optimizer variables and, unless
    ``save_weights_only``, its config) with Orbax, like :class:`ModelCheckpoint`: every epoch
    (step = the 0-based epoch) or every ``save_freq`` batches (step = batches seen), keeping
    the latest ``max_to_keep`` checkpoints in ``directory``.

    It needs the ``orbax-checkpoint`` package (which needs JAX): without it the constructor
    raises an ImportError naming it. kiln's own :class:`ModelCheckpoint` and
    :class:`BackupAndRestore` need nothing beyond kiln.

    Args:
        directory: the checkpoint directory.
        monitor: the metric for ``save_best_only`` ("val_loss").
        verbose: 0 or 1.
        save_best_only: save only when ``monitor`` improves.
        mode: "auto", "min" or "max".
        save_freq: "epoch" or an int (batches).
        initial_value_threshold: the starting "best" value.
        max_to_keep: the number of recent checkpoints kept (1; None keeps all).
        save_on_background: save asynchronously (True).
        save_weights_only: leave out the optimizer variables and the model config (False).

    Example:
        >>> model.fit(x, y, validation_split=0.1, callbacks=[
        ...     kiln.callbacks.OrbaxCheckpoint("/tmp/ckpt", save_best_only=True)])
    """

    def __init__(self, directory: str | os.PathLike, monitor: str = "val_loss", verbose: int = 0,
                 save_best_only: bool = False, mode: str = "auto",
                 save_freq: str | int = "epoch", initial_value_threshold: float | None = None,
                 max_to_keep: int | None = 1, save_on_background: bool = True,
                 save_weights_only: bool = False):
        ocp = _import_orbax()
        super().__init__()
        if save_freq != "epoch" and (isinstance(save_freq, bool) or
                                     not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(f"OrbaxCheckpoint: unrecognized save_freq: {save_freq!r}. "
                             "Expected save_freq are 'epoch' or integer values")
        self.directory = os.fspath(directory)
        self.monitor = monitor
        self.verbose = verbose
        self.save_best_only = save_best_only
        self.mode = check_mode("OrbaxCheckpoint", mode)
        self.save_freq = save_freq
        self.best: float | None = initial_value_threshold
        self.max_to_keep = max_to_keep
        self.save_on_background = save_on_background
        self.save_weights_only = save_weights_only
        self._direction: str | None = None
        self._batches_seen_since_last_saving = 0
        self._last_batch_seen: int | None = None
        self._total_batches_seen = 0
        self._async_futures: list[Any] = []
        self._ocp = ocp
        policy = None
        if max_to_keep is not None:
            policy = ocp.training.preservation_policies.LatestN(max_to_keep)
        self.checkpointer = ocp.training.Checkpointer(
            directory=self.directory, preservation_policy=policy,
            save_decision_policy=ocp.training.save_decision_policies.FixedIntervalPolicy(1))

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        opt = getattr(model, "optimizer", None)
        if opt is not None:  # a reloaded model goes on counting its batches
            self._total_batches_seen = int(np.asarray(opt.iterations.value))

    def _improved(self, logs: dict | None, where: str) -> bool:
        if not self.save_best_only:
            return True
        current = (logs or {}).get(self.monitor)
        if current is None:
            warnings.warn(f"Can save best model only with {self.monitor} available, skipping "
                          f"save at {where}.", stacklevel=3)
            return False
        if self._direction is None:
            self._direction = infer_mode("OrbaxCheckpoint", self.monitor, self.mode, self.model)
        current = float(current)
        if self.best is not None and not (current < self.best if self._direction == "min"
                                          else current > self.best):
            return False
        self.best = current
        return True

    def _should_save_on_batch(self, batch: int) -> bool:
        if self.save_freq == "epoch":
            return False
        if self._last_batch_seen is None or batch <= self._last_batch_seen:
            add = batch + 1  # a new epoch
        else:
            add = batch - self._last_batch_seen
        self._batches_seen_since_last_saving += add
        self._last_batch_seen = batch
        self._total_batches_seen += add
        if self._batches_seen_since_last_saving >= self.save_freq:
            self._batches_seen_since_last_saving = 0
            return True
        return False

    def _save_checkpoint(self, step: int) -> None:
        payload: dict[str, Any] = {"pytree": state_tree(self.model, self.save_weights_only)}
        if not self.save_weights_only and hasattr(self.model, "get_config"):
            try:
                payload["model_config"] = {"config": json.dumps(
                    {"class_name": type(self.model).__name__,
                     "config": self.model.get_config()}, default=str)}
            except (TypeError, ValueError, NotImplementedError) as exc:
                warnings.warn(f"OrbaxCheckpoint: the model config could not be serialized "
                              f"({exc}); only its state is saved", stacklevel=3)
        if self.verbose > 0:
            print(f"\nOrbaxCheckpoint: saving step {step} to {self.directory}")
        with self._ocp.Context():
            if self.save_on_background:
                self._async_futures.append(
                    self.checkpointer.save_checkpointables_async(step, payload))
            else:
                self.checkpointer.save_checkpointables(step, payload)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self._should_save_on_batch(batch) and self._improved(logs, f"batch {batch}"):
            self._save_checkpoint(self._total_batches_seen)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.save_freq == "epoch" and self._improved(logs, f"epoch {epoch}"):
            self._save_checkpoint(epoch)

    def on_train_end(self, logs: dict | None = None) -> None:
        try:  # waits for the saves still running
            self.checkpointer.close()
        except Exception as exc:  # cleanup only: never mask the end of training
            warnings.warn(f"OrbaxCheckpoint: closing the checkpointer failed: {exc}",
                          stacklevel=2)

    def wait_until_finished(self) -> None:
        """Blocks until every asynchronous save has completed."""
        for future in self._async_futures:
            future.result()
        self._async_futures.clear()
        self.checkpointer.wait()
