"""The plain Python loops around the compiled steps: ``fit``, ``evaluate``, ``predict``, the
``*_on_batch`` methods and the callbacks' hooks.

With ``compile(steps_per_execution=N)`` the batches are grouped in executions of N: every
batch still runs its own step (the weights are bit-identical to N=1), but the batch-level
callbacks and the progress bar see one call per execution, as in Keras 3.
"""

from __future__ import annotations

import functools
import threading
import warnings
from typing import Any

import numpy as np

import kiln.config
from kiln import callbacks as callbacks_module
from kiln import distribution as dist_module
from kiln.models import distributed, snapshot
from kiln.models.compile_utils import positive_int, resolve_verbose
from kiln.models.data import (
    ArrayAdapter,
    IterableAdapter,
    is_iterable_data,
    pack,
    train_validation_split,
)


class _StateLock:
    """A model's re-entrant lock for the methods that use its metrics (see
    :func:`_one_at_a_time`); a copy of the model gets a fresh one."""

    __slots__ = ("lock",)

    def __init__(self) -> None:
        self.lock = threading.RLock()

    def __reduce__(self) -> tuple:
        return (_StateLock, ())


_STATE_LOCK_GUARD = threading.Lock()


def _one_at_a_time(method: Any) -> Any:
    """Runs ``method`` under the model's state lock: fit, evaluate and the train/test batch
    methods reset, accumulate and read the model's metrics, so two threads running them on
    one model at once would mix their numbers. predict needs no lock (docs/architecture.md,
    "Threads")."""

    method = distributed.fault_guard(method)

    @functools.wraps(method)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        holder = self.__dict__.get("_state_lock")
        if holder is None:
            with _STATE_LOCK_GUARD:  # not setattr: models track their attributes
                holder = self.__dict__.setdefault("_state_lock", _StateLock())
        with holder.lock:
            return method(self, *args, **kwargs)

    return locked


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
    @_one_at_a_time
    def fit(self, x: Any = None, y: Any = None, batch_size: int | None = None, epochs: int = 1,
            verbose: Any = "auto", callbacks: Any = None, validation_split: float = 0.0,
            validation_data: Any = None, shuffle: Any = True, class_weight: Any = None,
            sample_weight: Any = None, initial_epoch: int = 0,
            steps_per_epoch: int | None = None, validation_steps: int | None = None,
            validation_batch_size: int | None = None, validation_freq: Any = 1, *,
            check_finite: bool = True) -> Any:
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
            check_finite: refuse NaN or inf in ``x``, ``y``, ``sample_weight`` and the
                validation data with a ValueError naming the array and the first such value
                (arrays are checked once per call, generator batches as they arrive); False
                trains on them as they are (default True).

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
        # kiln.config.set_max_epochs / set_max_steps_per_epoch (Keras' debugging caps); a cap
        # on an epoch of unknown length ends the epoch early (step_cap), never cycles data
        epochs, steps_per_epoch, step_cap = kiln.config.fit_limits(int(epochs),
                                                                   steps_per_epoch)
        if isinstance(validation_split, bool) or not isinstance(
                validation_split, int | float) or not 0.0 <= validation_split < 1.0:
            raise ValueError("fit: validation_split must be a float in [0, 1), received "
                             f"{validation_split!r}")
        verbose = resolve_verbose(verbose)
        if self._custom("train"):  # an overridden train_step (kiln/models/custom_steps.py)
            train, first, val, step = self._custom_fit_data(
                x, y, sample_weight, class_weight, batch_size, steps_per_epoch, shuffle,
                validation_split, validation_data, validation_batch_size, validation_steps)
        else:
            if validation_split and validation_data is None:
                if is_iterable_data(x):
                    raise ValueError("fit: validation_split is only supported for array inputs; "
                                     "pass validation_data for generators")
                xs, ys, sws = self._prepare_arrays(x, y, sample_weight, class_weight, need_y=True,
                                                   check=check_finite)
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
                                              shuffle, True, class_weight, check_finite)
            val = None
            if validation_data is not None:
                val = self._validation_adapter(validation_data, validation_batch_size or
                                               batch_size, validation_steps, check_finite)
            y_specs, sw_specs = self._split_specs(first)
            step = self._train_step(y_specs, sw_specs)  # compiles; raises before any update
            if val is not None:
                vy_specs, vsw_specs = self._split_specs(val[1])
                self._test_step(vy_specs, vsw_specs)
                val = val[0]
        # Several ranks: same model and data everywhere, then rank 0's state (before a backup
        # is restored in on_train_begin, which every rank reads alike).
        if distributed.start(self, "fit", {"samples": getattr(train, "n", None),
                                           "steps": train.steps, "batch_size": batch_size,
                                           "epochs": int(epochs), "feeds": _specs(first)}):
            step = self._train_step(y_specs, sw_specs)  # rank 0's random streams
        steps = train.steps if not step_cap else min(train.steps or step_cap, step_cap)
        callbacks = self._callback_list(callbacks, verbose, epochs, steps, add_history=True)
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
                             validation_freq, rng_key, batch_begin, batch_end, step_cap)
        finally:
            self.resume_at(None)
        history = _find_history(callbacks)
        if history is not None:
            self.history = history
        return self.history

    def _fit_epochs(self, train: Any, val: Any, step: Any, callbacks: Any,
                    initial_epoch: int, epochs: int, skip: int, validation_freq: Any,
                    rng_key: np.ndarray, batch_begin: bool, batch_end: bool,
                    step_cap: int | None = None) -> None:
        """The epoch loop of :meth:`fit` (kept flat: this is the per-step hot path).

        Batches are grouped in executions of ``steps_per_execution``: the batch callbacks run
        at an execution's first batch (begin) and after its last one (end), and
        ``stop_training`` is honoured at execution ends."""
        fn = step.fn
        per_execution = self._steps_per_execution
        uses_key = step.uses_key
        before_step = self.optimizer.before_step
        accumulate = self._accumulate
        weights_lock = snapshot.weights_lock(self)  # readers see one step's weights
        metrics = self.metrics
        logs_of = step.logs or (lambda: {m.name: m.result() for m in metrics})
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
                if step_cap and steps_done >= step_cap:
                    break
                if skip:  # batches of this epoch trained before the restart
                    skip -= 1
                    steps_done += 1
                    continue
                if batch_begin and not in_execution:
                    callbacks.on_train_batch_begin(steps_done)
                rng_key[1] = self._rng_counter
                self._rng_counter += 1
                if uses_key:
                    feeds.append(rng_key)
                with weights_lock:
                    before_step()
                    outs = fn(*feeds)
                accumulate(step, outs, len(feeds[0]))
                steps_done += 1
                in_execution += 1
                if in_execution == per_execution:
                    in_execution = 0
                    if batch_end:
                        callbacks.on_train_batch_end(steps_done - 1, logs_of())
                    if self.stop_training:
                        break
            if in_execution and batch_end:  # the epoch's last, shorter execution
                callbacks.on_train_batch_end(steps_done - 1, logs_of())
            if steps_done == 0:
                warnings.warn(f"{self.name}: the training data ran out before epoch {epoch}; "
                              "interrupting training (pass steps_per_epoch and a generator "
                              "that yields steps_per_epoch * epochs batches)", stacklevel=3)
                break
            epoch_logs = logs_of()
            if val is not None and _should_validate(epoch, validation_freq):
                val_logs = self.evaluate(val, callbacks=callbacks, return_dict=True,
                                         verbose=0)
                epoch_logs.update({"val_" + k: v for k, v in val_logs.items()})
            callbacks.on_epoch_end(epoch, epoch_logs)
            training_logs = epoch_logs
            if self.stop_training:
                break
        if training_logs is not None:  # as Keras: with use_ema, fit ends on the averages
            self.optimizer.finalize_variable_values(self.trainable_weights)
        callbacks.on_train_end(logs=training_logs)

    def _callback_list(self, callbacks: Any, verbose: int, epochs: int, steps: int | None,
                       add_history: bool = False) -> Any:
        if isinstance(callbacks, callbacks_module.CallbackList):
            return callbacks
        # Only rank 0 prints the progress bar (kiln.distribution).
        return callbacks_module.CallbackList(callbacks, add_history=add_history,
                                             add_progbar=verbose != 0 and dist_module.is_chief(),
                                             model=self,
                                             verbose=verbose, epochs=epochs, steps=steps)

    # ---- evaluate / predict ------------------------------------------------------------------
    @_one_at_a_time
    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None,
                 verbose: Any = "auto", sample_weight: Any = None, steps: int | None = None,
                 callbacks: Any = None, return_dict: bool = False, *,
                 check_finite: bool = True, **kwargs: Any) -> Any:
        """Loss and metrics of the model on data (in inference mode).

        Args:
            x, y, sample_weight: as in :meth:`fit` (``x`` may also be an adapter made by fit).
            batch_size: samples per batch (default 32).
            verbose: ``"auto"``/1 progress bar, 0 silent.
            steps: number of batches (default: all).
            callbacks: Callbacks (their ``on_test_*`` hooks are called).
            return_dict: return ``{name: value}`` instead of a scalar/list.
            check_finite: refuse NaN or inf in the data, as in :meth:`fit` (default True).

        Returns:
            The loss (a float) when there are no metrics and one output; otherwise the list
            ``[loss, *metrics]`` in :attr:`metrics_names` order, or a dict.
        """
        if kwargs:
            raise TypeError(f"{self.name}: evaluate() got unexpected keyword argument(s) "
                            f"{sorted(kwargs)}")
        self._assert_compiled("evaluate")
        batch_size = positive_int("evaluate: batch_size", batch_size)
        steps, step_cap = kiln.config.loop_limits(positive_int("evaluate: steps", steps))
        verbose = resolve_verbose(verbose)
        structure = getattr(x, "custom_structure", None)  # fit's data for a custom test_step
        if isinstance(x, ArrayAdapter | IterableAdapter) and structure is None:
            adapter = x  # fit's validation data
            first = [a[:1] for a in adapter.arrays] if isinstance(x, ArrayAdapter) else None
        elif structure is not None or self._custom("test"):
            if structure is None:
                adapter, first, structure = self._custom_adapter(
                    x, y, sample_weight, batch_size, steps, False, "evaluate")
            else:
                adapter = x
                first = [a[:1] for a in x.arrays] if isinstance(x, ArrayAdapter) else \
                    x.convert(x.peek())
        else:
            adapter, first = self._make_adapter(x, y, sample_weight, batch_size, steps, False,
                                                True, check_finite=check_finite)
        if structure is not None:
            step = self._custom_step("test", first, structure)
        else:
            step = None if first is None else self._test_step(*self._split_specs(first))
        if distributed.start(self, "evaluate", {"samples": getattr(adapter, "n", None),
                                                "steps": adapter.steps, "feeds": _specs(first)}) \
                and structure is None and first is not None:
            step = self._test_step(*self._split_specs(first))  # rank 0's random streams
        callbacks = self._callback_list(callbacks, verbose, 1, adapter.steps)
        self.reset_metrics()
        metrics = self.metrics
        batch_begin, batch_end = _batch_hooks(callbacks, "test")
        callbacks.on_test_begin()
        accumulate = self._accumulate
        per_execution = self._steps_per_execution

        def logs_of() -> dict:
            if step is not None and step.logs is not None:
                return step.logs()
            return {m.name: m.result() for m in metrics}

        i = in_execution = 0
        for feeds in adapter.epoch():
            if step_cap and i >= step_cap:  # kiln.config.max_steps_per_epoch
                break
            if step is None:
                step = self._test_step(*self._split_specs(feeds))
            if batch_begin and not in_execution:
                callbacks.on_test_batch_begin(i)
            if step.uses_key:
                feeds.append(np.array([self._rng_seed or 0, self._rng_counter], np.int64))
            outs = step.fn(*feeds)
            accumulate(step, outs, len(feeds[0]))
            i += 1
            in_execution += 1
            if in_execution == per_execution:
                in_execution = 0
                if batch_end:
                    callbacks.on_test_batch_end(i - 1, logs_of())
        if in_execution and batch_end:  # the last, shorter execution
            callbacks.on_test_batch_end(i - 1, logs_of())
        logs = logs_of()
        callbacks.on_test_end(logs)
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    @distributed.fault_guard
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
        if (callbacks is None and verbose == 0 and steps is None and type(x) is np.ndarray
                and x.ndim and 0 < len(x) <= (batch_size or 32)
                and distributed.active() is None and not self._custom("predict")):
            # one batch, nothing to report (no callbacks, no progress bar): predict_on_batch's
            # path (docs/performance.md, "Serving at batch 1"); the call returns new arrays
            outs = self._serve(x)
            if outs is None:
                fn, feeds = self._batch_step("predict", x, None, None, None)
                outs = fn(*feeds)
            return pack(outs, self._model_output_structure())
        # after the one-batch path (the cap never limits one batch; 1 us a call saved)
        steps, step_cap = kiln.config.loop_limits(steps)
        custom = self._custom("predict")
        if custom:  # an overridden predict_step (kiln/models/custom_steps.py)
            adapter, first, structure = self._custom_adapter(x, None, None, batch_size, steps,
                                                             False, "predict")
            fn = self._custom_step("predict", first, structure).fn
        else:
            adapter, first = self._make_adapter(x, None, None, batch_size, steps, False, False)
            fn = self._predict_fn()
        if distributed.start(self, "predict", {"samples": getattr(adapter, "n", None),
                                               "steps": adapter.steps, "feeds": _specs(first)}) \
                and not custom:
            fn = self._predict_fn()  # rank 0's random streams
        callbacks = self._callback_list(callbacks, verbose, 1, adapter.steps)
        batch_begin, batch_end = _batch_hooks(callbacks, "predict")
        callbacks.on_predict_begin()
        chunks: list[list[np.ndarray]] = []
        per_execution = self._steps_per_execution
        i = in_execution = 0
        for feeds in adapter.epoch():
            if step_cap and i >= step_cap:  # kiln.config.max_steps_per_epoch
                break
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
        if not chunks:
            raise ValueError(f"{self.name}: predict received no data")
        if custom:
            results = [np.concatenate([c[j] for c in chunks]) for j in range(len(chunks[0]))]
            return results[0] if len(results) == 1 else results
        n_out = len(self._model_output_specs())
        results = [np.concatenate([c[j] for c in chunks]) for j in range(n_out)]
        return pack(results, self._model_output_structure())

    # ---- on_batch ----------------------------------------------------------------------------
    @_one_at_a_time
    def train_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None,
                       class_weight: Any = None, return_dict: bool = False, *,
                       check_finite: bool = True) -> Any:
        """One training step on one batch; returns the loss (and metrics) so far.
        ``check_finite`` (kiln's, default True): refuse NaN or inf in the batch, as fit."""
        self._assert_compiled("train_on_batch")
        step, feeds = self._batch_step("train", x, y, sample_weight, class_weight,
                                       check=check_finite)
        self.train_function = step.fn
        if step.uses_key:
            feeds.append(np.array([self._rng_seed or 0, self._rng_counter], dtype=np.int64))
        self._rng_counter += 1
        with snapshot.weights_lock(self):
            self.optimizer.before_step()
            outs = step.fn(*feeds)
        self._accumulate(step, outs, len(feeds[0]))
        return self._on_batch_result(return_dict)

    @_one_at_a_time
    def test_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None,
                      return_dict: bool = False, *, check_finite: bool = True) -> Any:
        """Loss and metrics on one batch (inference mode), accumulated like Keras 3.
        ``check_finite`` (kiln's, default True): refuse NaN or inf in the batch."""
        self._assert_compiled("test_on_batch")
        step, feeds = self._batch_step("test", x, y, sample_weight, None, check=check_finite)
        outs = step.fn(*feeds)
        self._accumulate(step, outs, len(feeds[0]))
        return self._on_batch_result(return_dict)

    @distributed.fault_guard
    def predict_on_batch(self, x: Any) -> Any:
        """The model's outputs on one batch."""
        outs = self._serve(x)
        if outs is not None:
            return pack(outs, self._model_output_structure())
        fn, feeds = self._batch_step("predict", x, None, None, None)
        outs = fn(*feeds)
        if self._custom("predict"):
            return outs[0] if len(outs) == 1 else list(outs)
        return pack(outs, self._model_output_structure())

    def _serve(self, x: Any) -> Any:
        """The outputs of the predict function on the array ``x`` when ``_batch_step`` has
        cached its step for ``x``'s sample shape and dtype (a model without a custom
        ``predict_step``: none is cached for one), else None (the caller takes the general
        path): the serving call with nothing but a dict lookup before the compiled call."""
        if type(x) is not np.ndarray or not x.ndim or not len(x):
            return None
        entry = self._batch_cache.get(("predict", x.shape[1:], x.dtype.str, None,
                                       distributed.key()))
        if entry is None:
            return None
        step, xd = entry[0], entry[1]
        return step.serve(x if x.dtype == xd else x.astype(xd))

    def _on_batch_result(self, return_dict: bool) -> Any:
        reader = self.__dict__.get("_batch_logs")  # a custom step's logs
        logs = reader() if reader is not None else self._logs()
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values


# ---- helpers -------------------------------------------------------------------------------
def _specs(feeds: Any) -> Any:
    """The per-sample shapes and dtypes of a feed list (what every rank must agree on)."""
    if feeds is None:
        return None
    return [[list(np.shape(f)[1:]), str(np.asarray(f).dtype)] for f in feeds]


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
