"""The plain Python loops around the compiled steps: ``fit``, ``evaluate``, ``predict``, the
``*_on_batch`` methods and the callbacks' hooks.

With ``compile(steps_per_execution=N)`` the batches are grouped in executions of N: every
batch still runs its own step (the weights are bit-identical to N=1), but the batch-level
callbacks and the progress bar see one call per execution, as in Keras 3.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from kiln import callbacks as callbacks_module
from kiln.models.compile_utils import positive_int, resolve_verbose
from kiln.models.data import (
    ArrayAdapter,
    IterableAdapter,
    is_iterable_data,
    pack,
    train_validation_split,
)


class LoopsMixin:
    """``fit``/``evaluate``/``predict``, the batch APIs, and resuming an interrupted fit."""

    _initial_epoch: int | None = None  # set by resume_at(), consumed by the next fit()
    _initial_step: int | None = None
    _initial_metric_states: dict | None = None

    def resume_at(self, epoch: int | None, step: int = 0,
                  metric_states: dict | None = None) -> None:
        """Makes the next :meth:`fit` resume an interrupted run (``BackupAndRestore`` calls it,
        from ``on_train_begin`` or before).

        The next fit() starts at ``epoch`` (0-based), skipping the first ``step`` batches of
        it, restoring these metric states (name -> ``Metric.get_state()`` list) for the
        resumed epoch; consumed by that fit, whether it ends or fails. ``resume_at(None)``
        cancels a pending resume.

        Args:
            epoch: the epoch to start at (it overrides fit's ``initial_epoch``), or None.
            step: the batches of ``epoch`` already trained (they are skipped).
            metric_states: the metrics' states after those batches (used when ``step`` > 0).

        Raises:
            ValueError: for a negative or non-integer ``epoch`` or ``step``.
        """
        if epoch is None:
            self._initial_epoch = self._initial_step = self._initial_metric_states = None
            return
        for name, value in (("epoch", epoch), ("step", step)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
                raise ValueError(f"{self.name}: resume_at: {name} must be a non-negative "
                                 f"integer, received {value!r}")
        self._initial_epoch, self._initial_step = int(epoch), int(step)
        self._initial_metric_states = dict(metric_states) if metric_states else None

    # ---- fit ---------------------------------------------------------------------------------
    def fit(self, x: Any = None, y: Any = None, batch_size: int | None = None, epochs: int = 1,
            verbose: Any = "auto", callbacks: Any = None, validation_split: float = 0.0,
            validation_data: Any = None, shuffle: Any = True, class_weight: Any = None,
            sample_weight: Any = None, initial_epoch: int = 0,
            steps_per_epoch: int | None = None, validation_steps: int | None = None,
            validation_batch_size: int | None = None, validation_freq: Any = 1) -> Any:
        """Trains the model.

        Args:
            x: input data: an array, a list/dict of arrays (dict keys = input names), or an
                iterable/generator of ``(x, y)`` / ``(x, y, sample_weight)`` batches.
            y: targets (arrays like ``x``); None when ``x`` yields batches.
            batch_size: samples per step (default 32; arrays only).
            epochs: index of the last epoch (training runs ``initial_epoch .. epochs-1``).
            verbose: ``"auto"``/1 progress bar, 2 one line per epoch, 0 silent.
            callbacks: a list of Callbacks (or a CallbackList).
            validation_split: fraction in [0, 1) of the LAST samples (before shuffling) held
                out for validation.
            validation_data: ``(x_val, y_val)``, ``(x_val, y_val, sw_val)`` or an iterable.
            shuffle: reshuffle the training samples every epoch (``"batch"`` shuffles the
                batch order only).
            class_weight: ``{class_index: weight}`` for a single-output model.
            sample_weight: per-sample loss weights (array, or list/dict per output).
            initial_epoch: the epoch to start from (to resume; see also :meth:`resume_at`).
            steps_per_epoch: steps per epoch (default: one pass over the data).
            validation_steps: steps of each validation run.
            validation_batch_size: batch size of validation (default ``batch_size``).
            validation_freq: validate every N epochs (int) or at the listed epochs (1-based).

        Returns:
            The :class:`kiln.callbacks.History` (``history.history`` maps metric names to
            per-epoch values).

        Raises:
            ValueError / TypeError before any weight changes for bad arguments or data.
        """
        self._assert_compiled("fit")
        batch_size = positive_int("fit: batch_size", batch_size)
        # The memory plan (and a memory budget) sizes the batch dimension with this.
        self._plan_batch_size = batch_size or 32
        steps_per_epoch = positive_int("fit: steps_per_epoch", steps_per_epoch)
        validation_batch_size = positive_int("fit: validation_batch_size",
                                             validation_batch_size)
        if isinstance(epochs, bool) or not isinstance(epochs, int | np.integer) or epochs < 0:
            raise ValueError(f"fit: epochs must be a non-negative integer, received {epochs!r}")
        if isinstance(validation_split, bool) or not isinstance(
                validation_split, int | float) or not 0.0 <= validation_split < 1.0:
            raise ValueError("fit: validation_split must be a float in [0, 1), received "
                             f"{validation_split!r}")
        verbose = resolve_verbose(verbose)
        if validation_split and validation_data is None:
            if is_iterable_data(x):
                raise ValueError("fit: validation_split is only supported for array inputs; "
                                 "pass validation_data for generators")
            xs, ys, sws = self._prepare_arrays(x, y, sample_weight, class_weight, need_y=True)
            (train_arrays, val_arrays) = train_validation_split(xs + ys + sws,
                                                                validation_split)
            n_x, n_y = len(xs), len(ys)
            x, y = train_arrays[:n_x], train_arrays[n_x:n_x + n_y]
            sample_weight = train_arrays[n_x + n_y:] or None
            class_weight = None
            vx, vy = val_arrays[:n_x], val_arrays[n_x:n_x + n_y]
            vsw = val_arrays[n_x + n_y:] or None
            validation_data = (vx, vy, vsw) if vsw else (vx, vy)
            x = self._pack_inputs(list(x))
            y = pack(list(y), self._model_output_structure())
            if sample_weight is not None and len(sample_weight) == 1:
                sample_weight = sample_weight[0]
        train, first = self._make_adapter(x, y, sample_weight, batch_size, steps_per_epoch,
                                          shuffle, True, class_weight)
        val = None
        if validation_data is not None:
            val = self._validation_adapter(validation_data, validation_batch_size or
                                           batch_size, validation_steps)
        y_specs, sw_specs = self._split_specs(first)
        step = self._train_step(y_specs, sw_specs)  # compiles; raises before any update
        if val is not None:
            vy_specs, vsw_specs = self._split_specs(val[1])
            self._test_step(vy_specs, vsw_specs)
            val = val[0]
        callbacks = self._callback_list(callbacks, verbose, epochs, train.steps,
                                        add_history=True)
        for cb in getattr(callbacks, "callbacks", []):
            if hasattr(cb, "set_callback_list"):
                cb.set_callback_list(callbacks)
        self.stop_training = False
        batch_begin, batch_end = _batch_hooks(callbacks, "train")
        try:
            callbacks.on_train_begin()
            # A callback restoring a backup (BackupAndRestore) calls resume_at() and may have
            # restored the random state: read both after on_train_begin.
            if self._initial_epoch is not None:
                initial_epoch = self._initial_epoch
            skip = int(self._initial_step or 0)
            rng_key = np.array([self._rng_seed or 0, 0], dtype=np.int64)
            self._fit_epochs(train, val, step, callbacks, initial_epoch, epochs, skip,
                             validation_freq, rng_key, batch_begin, batch_end)
        finally:
            self.resume_at(None)
        history = _find_history(callbacks)
        if history is not None:
            self.history = history
        return self.history

    def _fit_epochs(self, train: Any, val: Any, step: Any, callbacks: Any,
                    initial_epoch: int, epochs: int, skip: int, validation_freq: Any,
                    rng_key: np.ndarray, batch_begin: bool, batch_end: bool) -> None:
        """The epoch loop of :meth:`fit` (kept flat: this is the per-step hot path).

        Batches are grouped in executions of ``steps_per_execution``: the batch callbacks run
        at an execution's first batch (begin) and after its last one (end), and
        ``stop_training`` is honoured at execution ends."""
        fn = step.fn
        per_execution = self._steps_per_execution
        uses_key = step.uses_key
        before_step = self.optimizer.before_step
        accumulate = self._accumulate
        metrics = self.metrics
        training_logs = None
        for epoch in range(int(initial_epoch), int(epochs)):
            for m in metrics:
                m.reset_state()
            if skip and self._initial_metric_states:  # resumed mid-epoch: its metrics so far
                for m in metrics:
                    state = self._initial_metric_states.get(m.name)
                    if state is not None:
                        m.set_state(state)
                self._initial_metric_states = None
            callbacks.on_epoch_begin(epoch)
            steps_done = 0
            in_execution = 0  # batches run in the current execution
            for feeds in train.epoch():
                if skip:  # batches of this epoch trained before the restart
                    skip -= 1
                    steps_done += 1
                    continue
                if batch_begin and not in_execution:
                    callbacks.on_train_batch_begin(steps_done)
                rng_key[1] = self._rng_counter
                self._rng_counter += 1
                before_step()
                if uses_key:
                    feeds.append(rng_key)
                outs = fn(*feeds)
                accumulate(step, outs, len(feeds[0]))
                steps_done += 1
                in_execution += 1
                if in_execution == per_execution:
                    in_execution = 0
                    if batch_end:
                        callbacks.on_train_batch_end(steps_done - 1, {m.name: m.result()
                                                                      for m in metrics})
                    if self.stop_training:
                        break
            if in_execution and batch_end:  # the epoch's last, shorter execution
                callbacks.on_train_batch_end(steps_done - 1, {m.name: m.result()
                                                              for m in metrics})
            if steps_done == 0:
                warnings.warn(f"{self.name}: the training data ran out before epoch {epoch}; "
                              "interrupting training (pass steps_per_epoch and a generator "
                              "that yields steps_per_epoch * epochs batches)", stacklevel=3)
                break
            epoch_logs = {m.name: m.result() for m in metrics}
            if val is not None and _should_validate(epoch, validation_freq):
                val_logs = self.evaluate(val, callbacks=callbacks, return_dict=True,
                                         verbose=0)
                epoch_logs.update({"val_" + k: v for k, v in val_logs.items()})
            callbacks.on_epoch_end(epoch, epoch_logs)
            training_logs = epoch_logs
            if self.stop_training:
                break
        callbacks.on_train_end(logs=training_logs)

    def _callback_list(self, callbacks: Any, verbose: int, epochs: int, steps: int | None,
                       add_history: bool = False) -> Any:
        if isinstance(callbacks, callbacks_module.CallbackList):
            return callbacks
        return callbacks_module.CallbackList(callbacks, add_history=add_history,
                                             add_progbar=verbose != 0, model=self,
                                             verbose=verbose, epochs=epochs, steps=steps)

    # ---- evaluate / predict ------------------------------------------------------------------
    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None,
                 verbose: Any = "auto", sample_weight: Any = None, steps: int | None = None,
                 callbacks: Any = None, return_dict: bool = False) -> Any:
        """Loss and metrics of the model on data (in inference mode).

        Args:
            x, y, sample_weight: as in :meth:`fit` (``x`` may also be an adapter made by fit).
            batch_size: samples per batch (default 32).
            verbose: ``"auto"``/1 progress bar, 0 silent.
            steps: number of batches (default: all).
            callbacks: Callbacks (their ``on_test_*`` hooks are called).
            return_dict: return ``{name: value}`` instead of a scalar/list.

        Returns:
            The loss (a float) when there are no metrics and one output; otherwise the list
            ``[loss, *metrics]`` in :attr:`metrics_names` order, or a dict.
        """
        self._assert_compiled("evaluate")
        batch_size = positive_int("evaluate: batch_size", batch_size)
        steps = positive_int("evaluate: steps", steps)
        verbose = resolve_verbose(verbose)
        if isinstance(x, ArrayAdapter | IterableAdapter):  # fit's validation data
            adapter = x
            first = [a[:1] for a in adapter.arrays] if isinstance(x, ArrayAdapter) else None
        else:
            adapter, first = self._make_adapter(x, y, sample_weight, batch_size, steps, False,
                                                True)
        step = None if first is None else self._test_step(*self._split_specs(first))
        callbacks = self._callback_list(callbacks, verbose, 1, adapter.steps)
        self.reset_metrics()
        metrics = self.metrics
        batch_begin, batch_end = _batch_hooks(callbacks, "test")
        callbacks.on_test_begin()
        accumulate = self._accumulate
        per_execution = self._steps_per_execution
        i = in_execution = 0
        for feeds in adapter.epoch():
            if step is None:
                step = self._test_step(*self._split_specs(feeds))
            if batch_begin and not in_execution:
                callbacks.on_test_batch_begin(i)
            outs = step.fn(*feeds)
            accumulate(step, outs, len(feeds[0]))
            i += 1
            in_execution += 1
            if in_execution == per_execution:
                in_execution = 0
                if batch_end:
                    callbacks.on_test_batch_end(i - 1, {m.name: m.result() for m in metrics})
        if in_execution and batch_end:  # the last, shorter execution
            callbacks.on_test_batch_end(i - 1, {m.name: m.result() for m in metrics})
        logs = {m.name: m.result() for m in self.metrics}
        callbacks.on_test_end(logs)
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x: Any, batch_size: int | None = None, verbose: Any = "auto",
                steps: int | None = None, callbacks: Any = None) -> Any:
        """The model's outputs on ``x`` (inference mode), batch by batch.

        Args:
            x: an array, a list/dict of arrays, or an iterable of batches (``x`` or
                ``(x, ...)``).
            batch_size: samples per batch (default 32).
            verbose: ``"auto"``/1 progress bar, 0 silent.
            steps: number of batches (default: all).
            callbacks: Callbacks (their ``on_predict_*`` hooks are called).

        Returns:
            A NumPy array, or a list/dict of arrays for several outputs.
        """
        batch_size = positive_int("predict: batch_size", batch_size)
        steps = positive_int("predict: steps", steps)
        verbose = resolve_verbose(verbose)
        adapter, _ = self._make_adapter(x, None, None, batch_size, steps, False, False)
        fn = self._predict_fn()
        callbacks = self._callback_list(callbacks, verbose, 1, adapter.steps)
        batch_begin, batch_end = _batch_hooks(callbacks, "predict")
        callbacks.on_predict_begin()
        chunks: list[list[np.ndarray]] = []
        per_execution = self._steps_per_execution
        i = in_execution = 0
        for feeds in adapter.epoch():
            if batch_begin and not in_execution:
                callbacks.on_predict_batch_begin(i)
            outs = fn(*feeds)
            chunks.append(outs)
            i += 1
            in_execution += 1
            if in_execution == per_execution:
                if batch_end:
                    callbacks.on_predict_batch_end(
                        i - 1, {"outputs": _execution_outputs(chunks, in_execution)})
                in_execution = 0
        if in_execution and batch_end:  # the last, shorter execution
            callbacks.on_predict_batch_end(
                i - 1, {"outputs": _execution_outputs(chunks, in_execution)})
        callbacks.on_predict_end()
        n_out = len(self._model_output_specs())
        if not chunks:
            raise ValueError(f"{self.name}: predict received no data")
        results = [np.concatenate([c[j] for c in chunks]) for j in range(n_out)]
        return pack(results, self._model_output_structure())

    # ---- on_batch ----------------------------------------------------------------------------
    def train_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None,
                       class_weight: Any = None, return_dict: bool = False) -> Any:
        """One training step on one batch; returns the loss (and metrics) so far."""
        self._assert_compiled("train_on_batch")
        step, feeds = self._batch_step("train", x, y, sample_weight, class_weight)
        self.train_function = step.fn
        if step.uses_key:
            feeds.append(np.array([self._rng_seed or 0, self._rng_counter], dtype=np.int64))
        self._rng_counter += 1
        self.optimizer.before_step()
        outs = step.fn(*feeds)
        self._accumulate(step, outs, len(feeds[0]))
        return self._on_batch_result(return_dict)

    def test_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None,
                      return_dict: bool = False) -> Any:
        """Loss and metrics on one batch (inference mode), accumulated like Keras 3."""
        self._assert_compiled("test_on_batch")
        step, feeds = self._batch_step("test", x, y, sample_weight, None)
        outs = step.fn(*feeds)
        self._accumulate(step, outs, len(feeds[0]))
        return self._on_batch_result(return_dict)

    def predict_on_batch(self, x: Any) -> Any:
        """The model's outputs on one batch."""
        fn, feeds = self._batch_step("predict", x, None, None, None)
        outs = fn(*feeds)
        return pack(outs, self._model_output_structure())

    def _on_batch_result(self, return_dict: bool) -> Any:
        logs = self._logs()
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values


# ---- helpers -------------------------------------------------------------------------------
def _should_validate(epoch: int, freq: Any) -> bool:
    if isinstance(freq, int):
        return (epoch + 1) % freq == 0
    if isinstance(freq, list | tuple | set):
        return (epoch + 1) in freq
    raise ValueError(f"fit: validation_freq must be an int or a list of epochs, received "
                     f"{freq!r}")


def _batch_hooks(callbacks: Any, mode: str) -> tuple[bool, bool]:
    """Whether any callback overrides the per-batch hooks (skipped otherwise, to keep the
    per-step overhead small)."""
    base = callbacks_module.Callback
    items = getattr(callbacks, "callbacks", None)
    if items is None:
        return True, True
    begin = end = False
    hooks = [f"on_{mode}_batch_"] + (["on_batch_"] if mode == "train" else [])
    for cb in items:
        cls = type(cb)
        for h in hooks:
            if getattr(cls, h + "begin", None) is not getattr(base, h + "begin", None):
                begin = True
            if getattr(cls, h + "end", None) is not getattr(base, h + "end", None):
                end = True
    return begin, end


def _execution_outputs(chunks: list[list[np.ndarray]], n: int) -> list[np.ndarray]:
    """The outputs of the last ``n`` batches, concatenated per output (Keras 3 passes an
    execution's outputs to ``on_predict_batch_end``); one batch's list as is."""
    if n == 1:
        return chunks[-1]
    last = chunks[-n:]
    return [np.concatenate([c[j] for c in last]) for j in range(len(last[0]))]


def _find_history(callbacks: Any) -> Any:
    for cb in getattr(callbacks, "callbacks", []) or []:
        if isinstance(cb, callbacks_module.History):
            return cb
    return getattr(callbacks, "_history", None)


__all__ = ["LoopsMixin"]
