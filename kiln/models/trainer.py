"""The training API of :class:`~kiln.models.Model`: ``compile``, ``fit``, ``evaluate``,
``predict`` and the ``*_on_batch`` methods.

One training step is ONE compiled graph (DESIGN.md section 2): placeholders for the inputs,
targets, sample weights and the int64 random key ``[seed, counter]``; the model traced inside
``trace(training=True, rng_key=key)``; the weighted losses, regularization penalties and layer
losses; the metrics' statistics; ``kiln.grad`` of the loss; the optimizer's update nodes and
the layers' own updates (BatchNormalization's moving statistics). It is compiled once per
input signature, with a ``None`` batch dimension, so the last partial batch reuses it.

``fit`` is then a plain Python loop: batches -> callbacks -> train function -> logs.
With ``compile(steps_per_execution=N)`` the batches are grouped in executions of N: every
batch still runs its own step (the weights are bit-identical to N=1), but the batch-level
callbacks and the progress bar see one call per execution, as in Keras 3.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

import kiln.config
from kiln import losses as losses_module
from kiln import metrics as metrics_module
from kiln.core import executor
from kiln.core.autodiff import grad
from kiln.core.ir import Node, depends_on
from kiln.core.ops._rules import fmt
from kiln.core.ops.source import placeholder
from kiln.layers.base import flatten
from kiln.layers.context import trace
from kiln.models.data import (
    ArrayAdapter,
    IterableAdapter,
    TensorSpec,
    flatten_data,
    is_iterable_data,
    num_samples,
    pack,
    structure_of,
    train_validation_split,
    unpack_item,
)
from kiln.random_state import next_seed


class _Output:
    """What compile() attached to one model output."""

    __slots__ = ("name", "loss", "weight", "metrics", "weighted_metrics", "tracker")

    def __init__(self, name: str, loss: Any, weight: float, metrics: list,
                 weighted_metrics: list, tracker: Any):
        self.name = name
        self.loss = loss
        self.weight = weight
        self.metrics = metrics
        self.weighted_metrics = weighted_metrics
        self.tracker = tracker


class _Step:
    """A compiled train/test function and how to read its outputs."""

    __slots__ = ("fn", "trackers", "metric_slices", "n_out", "uses_key")

    def __init__(self, fn: Any, trackers: list, metric_slices: list, uses_key: bool = False):
        self.fn = fn
        self.trackers = trackers
        self.metric_slices = metric_slices
        self.uses_key = uses_key
        self.n_out = len(trackers) + sum(b - a for _, a, b in metric_slices)


def _resolve_verbose(verbose: Any) -> int:
    if verbose == "auto":
        return 1
    if isinstance(verbose, bool) or not isinstance(verbose, int) or verbose not in (0, 1, 2):
        raise ValueError(f"verbose must be 'auto', 0, 1 or 2, received {verbose!r}")
    return verbose


def _positive_int(name: str, value: Any, allow_none: bool = True) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, received {value!r}")
    return int(value)


def _backend_for(device: Any) -> str | None:
    """The backend for ``compile(device=...)`` (None: KILN_DEVICE, default "cpu"); None means
    the default backend."""
    from kiln import config
    from kiln.core.executor import backend_for_device

    device = config.device() if device is None else device
    if device == "reference":
        return "reference"
    if device == "gpu":
        device = "cuda"
    if device not in ("cpu", "cuda", "auto"):
        raise ValueError(f"compile: device must be None, 'cpu', 'cuda', 'auto' or "
                         f"'reference', received {device!r}")
    name = backend_for_device(device)
    return None if name == config.default_backend() else name


class Trainer:
    """Mixin with the training API; see :class:`kiln.models.Model`."""

    compiled = False
    optimizer: Any = None
    stop_training = False
    history: Any = None
    train_function: Any = None
    test_function: Any = None
    predict_function: Any = None
    _rng_seed: int | None = None
    _rng_counter = 0
    _compile_args: dict | None = None
    _outputs: list | None = None
    _initial_epoch: int | None = None
    _initial_step: int | None = None
    _initial_metric_states: dict | None = None  # the resumed epoch's metrics (a backup's)
    _steps_per_execution = 1

    def _init_trainer(self) -> None:
        self.compiled = False
        self.optimizer = None
        self.stop_training = False
        self.history = None
        self._rng_seed = None
        self._rng_counter = 0
        self._train_fns: dict = {}
        self._test_fns: dict = {}
        self._predict_fns: dict = {}
        self.train_function = None
        self.test_function = None
        self.predict_function = None
        self._compile_args = None
        self._steps_per_execution = 1
        self._outputs = None
        self._batch_cache: dict = {}
        self._loss_tracker = metrics_module.Mean(name="loss")

    # ---- compile ---------------------------------------------------------------------------
    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Any = None,
                loss_weights: Any = None, weighted_metrics: Any = None,
                run_eagerly: bool = False, steps_per_execution: int = 1,
                jit_compile: Any = "auto", auto_scale_loss: bool = True,
                memory_budget: Any = None, device: Any = None) -> None:
        """Configures the model for training.

        Args:
            optimizer: a name (``"adam"``), a config dict or an Optimizer. It is built on the
                model's trainable weights as soon as they exist.
            loss: a name, a Loss, a callable ``fn(y_true, y_pred)``; or a list/dict (by output
                name) with one per output.
            metrics: a list of metrics (names, Metric objects, callables) applied to every
                output, or a dict/list of lists per output. ``"accuracy"``/``"acc"`` picks
                binary, categorical or sparse categorical accuracy from the loss and shapes.
            loss_weights: a list/dict of per-output loss weights.
            weighted_metrics: metrics that use ``sample_weight``/``class_weight``.
            run_eagerly, jit_compile, auto_scale_loss: accepted for Keras compatibility;
                kiln always runs the compiled step.
            steps_per_execution: the number of batches per execution (an int >= 1). ``fit``,
                ``evaluate`` and ``predict`` call the batch-level callbacks
                (``on_*_batch_begin`` with the index of an execution's first batch,
                ``on_*_batch_end`` with the index of its last batch and the logs after it)
                and advance the progress bar once per execution; the last execution of an
                epoch may be shorter. Every batch still runs its own training step, so the
                weights, losses and metrics are the same as with 1.
            memory_budget: passed to the compiler (rematerialization under a budget).
            device: ``None``/``"cpu"`` (default backend), ``"cuda"``, ``"auto"`` or
                ``"reference"`` (NumPy interpreter).

        Raises:
            ValueError: for unknown loss/metric/optimizer names (listing the valid ones), or a
                ``steps_per_execution`` that is not an int >= 1.

        Example:
            >>> model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
            ...               metrics=["accuracy"])
        """
        from kiln import optimizers

        if isinstance(steps_per_execution, bool) or not isinstance(
                steps_per_execution, int | np.integer) or steps_per_execution < 1:
            raise ValueError(f"{self.name}: compile: steps_per_execution must be an int >= 1, "
                             f"received steps_per_execution={steps_per_execution!r}")
        opt = optimizers.get(optimizer)
        _map_leaves(loss, losses_module.get, "loss")
        for ms in (metrics, weighted_metrics):
            _map_leaves(ms, _check_metric, "metrics")
        if loss_weights is not None and not isinstance(loss_weights, list | tuple | dict
                                                        | int | float):
            raise TypeError(f"{self.name}: loss_weights must be a list, a dict or a number, "
                            f"received {type(loss_weights).__name__}")
        backend = _backend_for(device)
        self.optimizer = opt
        self._compile_args = {"optimizer": optimizer, "loss": loss, "metrics": metrics,
                              "loss_weights": loss_weights, "weighted_metrics": weighted_metrics,
                              "steps_per_execution": int(steps_per_execution)}
        self._steps_per_execution = int(steps_per_execution)
        self._memory_budget = memory_budget
        self._backend = backend
        self._rng_seed = next_seed()
        self._train_fns = {}
        self._test_fns = {}
        self._predict_fns = {}
        self._batch_cache = {}
        self.train_function = self.test_function = self.predict_function = None
        self._outputs = None
        self._loss_tracker = metrics_module.Mean(name="loss")
        self.compiled = True
        self._build_optimizer_if_ready()

    @property
    def steps_per_execution(self) -> int:
        """Batches per execution (set by :meth:`compile`; 1 by default)."""
        return self._steps_per_execution

    def _build_optimizer_if_ready(self) -> None:
        if self.optimizer is not None and self.built:
            variables = self.trainable_weights
            if variables:
                self.optimizer.build(variables)

    def _assert_compiled(self, method: str) -> None:
        if not self.compiled:
            raise ValueError(f"You must call `compile()` on model {self.name!r} before using "
                             f"`{method}()`")

    def get_compile_config(self) -> dict | None:
        """The arguments of :meth:`compile`, serialized (for saving)."""
        if not self.compiled:
            return None
        from kiln import optimizers

        args = self._compile_args or {}
        return {"optimizer": optimizers.serialize(self.optimizer),
                "loss": _map_leaves(args.get("loss"), losses_module.serialize, "loss"),
                "metrics": _map_leaves(args.get("metrics"), metrics_module.serialize,
                                       "metrics"),
                "loss_weights": args.get("loss_weights"),
                "weighted_metrics": _map_leaves(args.get("weighted_metrics"),
                                                metrics_module.serialize, "metrics"),
                "steps_per_execution": int(args.get("steps_per_execution", 1))}

    def compile_from_config(self, config: dict, custom_objects: dict | None = None) -> None:
        """Compiles the model from :meth:`get_compile_config`'s output."""
        from kiln import optimizers

        config = dict(config)
        opt = config.get("optimizer", "rmsprop")
        if isinstance(opt, dict):
            opt = optimizers.deserialize(opt, custom_objects)

        def de_loss(x: Any) -> Any:
            return losses_module.deserialize(x, custom_objects)

        def de_metric(x: Any) -> Any:
            return metrics_module.deserialize(x, custom_objects)

        self.compile(optimizer=opt,
                     loss=_map_leaves(config.get("loss"), de_loss, "loss"),
                     metrics=_map_leaves(config.get("metrics"), de_metric, "metrics"),
                     loss_weights=config.get("loss_weights"),
                     weighted_metrics=_map_leaves(config.get("weighted_metrics"), de_metric,
                                                  "metrics"),
                     steps_per_execution=1 if config.get("steps_per_execution") is None
                     else config["steps_per_execution"])

    # ---- model structure seen by the trainer -------------------------------------------------
    def _model_input_specs(self) -> list[TensorSpec] | None:
        spec = getattr(self, "_build_input_spec", None)
        if spec is None or not self.built:
            return None
        flat = flatten(spec)
        struct = structure_of(spec)
        names = list(struct[1]) if struct[0] == "dict" else [
            s.name or (f"input_{i}" if len(flat) > 1 else "input") for i, s in enumerate(flat)]
        return [TensorSpec(s.shape, s.dtype, n) for s, n in zip(flat, names)]

    def _model_input_structure(self) -> tuple | None:
        spec = getattr(self, "_build_input_spec", None)
        return None if spec is None or not self.built else structure_of(spec)

    def _pack_inputs(self, flat: list) -> Any:
        return pack(flat, self._model_input_structure() or ("single",))

    def _model_output_specs(self) -> list[TensorSpec]:
        cached = getattr(self, "_output_specs_cache", None)
        if cached is not None:
            return cached
        specs = self._model_input_specs()
        if specs is None:
            raise ValueError(f"{self.name}: the model is not built yet; call it on data, "
                             "build(input_shape) or fit() first")
        phs = [placeholder(s.shape, s.dtype) for s in specs]
        with trace(training=False):
            out = self(self._pack_inputs(phs))
        self._output_structure_cache = structure_of(out)
        self._output_specs_cache = [TensorSpec.of(t) for t in flatten(out)]
        return self._output_specs_cache

    def _model_output_structure(self) -> tuple:
        self._model_output_specs()
        return self._output_structure_cache

    @property
    def output_names(self) -> list[str]:
        struct = self._model_output_structure()
        if struct[0] == "dict":
            return list(struct[1])
        n = len(self._model_output_specs())
        return ["output"] if n == 1 else [f"output_{i + 1}" for i in range(n)]

    def _build_from_arrays(self, flat: list[np.ndarray], structure: tuple) -> None:
        """Builds an unbuilt model from the shapes and dtypes of its first data."""
        specs = []
        for a in flat:
            if a.ndim == 0:
                raise ValueError(f"{self.name}: input data must have a batch dimension, "
                                 "received a scalar")
            if a.dtype.kind in "iu":
                dtype = "int64" if a.dtype.itemsize > 4 else "int32"
            else:
                dtype = self.dtype if self.dtype in ("float32", "float64") else \
                    kiln.config.floatx()
            specs.append(TensorSpec((None,) + a.shape[1:], dtype))
        self._symbolic_build(pack(specs, structure))
        self._build_optimizer_if_ready()

    # ---- per-output compile configuration ----------------------------------------------------
    def _resolve_outputs(self, y_specs: list[TensorSpec] | None) -> list[_Output]:
        """Attaches losses, loss weights and metrics to the model's outputs (once)."""
        if self._outputs is not None:
            return self._outputs
        args = self._compile_args or {}
        names = self.output_names
        out_specs = self._model_output_specs()
        n = len(names)
        loss = args.get("loss")
        per_loss = _per_output(loss, names, "loss", self.name)
        weights = args.get("loss_weights")
        if weights is None:
            per_weight = [1.0] * n
        elif isinstance(weights, int | float):
            per_weight = [float(weights)] * n
        else:
            per_weight = [1.0 if w is None else float(w) for w in
                          _per_output(weights, names, "loss_weights", self.name)]
        per_metrics = _per_output_metrics(args.get("metrics"), names, self.name)
        per_wmetrics = _per_output_metrics(args.get("weighted_metrics"), names, self.name)
        outputs = []
        used: set[int] = set()
        for i, name in enumerate(names):
            loss_obj = losses_module.as_loss_object(per_loss[i])
            y_spec = y_specs[i] if y_specs is not None and i < len(y_specs) else None
            ms = [self._make_metric(m, loss_obj, y_spec, out_specs[i], i, n, name, used)
                  for m in per_metrics[i]]
            wms = [self._make_metric(m, loss_obj, y_spec, out_specs[i], i, n, name, used)
                   for m in per_wmetrics[i]]
            taken = {m.name for m in ms}
            for m in wms:  # Keras: a weighted metric that shares a name gets "weighted_"
                if m.name in taken:
                    m.name = f"weighted_{m.name}"
            tracker = metrics_module.Mean(name=f"{name}_loss") if n > 1 and loss_obj else None
            outputs.append(_Output(name, loss_obj, per_weight[i], ms, wms, tracker))
        seen: dict[str, int] = {"loss": 0}
        for o in outputs:
            for m in ([o.tracker] if o.tracker else []) + o.metrics + o.weighted_metrics:
                if m.name in seen:  # keep log keys unique
                    seen[m.name] += 1
                    m.name = f"{m.name}_{seen[m.name]}"
                else:
                    seen[m.name] = 0
        self._outputs = outputs
        return outputs

    def _make_metric(self, ident: Any, loss: Any, y_spec: TensorSpec | None,
                     out_spec: TensorSpec, index: int, n_outputs: int, out_name: str,
                     used: set[int]) -> Any:
        if isinstance(ident, str) and ident.lower() in ("accuracy", "acc"):
            y_shape = y_spec.shape if y_spec is not None else out_spec.shape
            y_int = y_spec is not None and str(y_spec.dtype).startswith("int")
            metric = metrics_module.accuracy_for(ident, loss, y_shape, y_int, out_spec.shape)
        else:
            metric = metrics_module.get(ident)
            if isinstance(ident, metrics_module.Metric):
                if id(ident) in used:  # the same object listed for several outputs
                    metric = type(ident).from_config(ident.get_config())
                used.add(id(ident))
        if n_outputs > 1:
            metric.name = f"{out_name}_{metric.name}"
        return metric

    @property
    def metrics(self) -> list:
        """The loss trackers and the compiled metrics (after the first fit/evaluate)."""
        out = [self._loss_tracker] if self.compiled else []
        for o in self._outputs or []:
            if o.tracker is not None:
                out.append(o.tracker)
        for o in self._outputs or []:
            out.extend(o.metrics)
            out.extend(o.weighted_metrics)
        return out

    @property
    def metrics_names(self) -> list[str]:
        return [m.name for m in self.metrics]

    def reset_metrics(self) -> None:
        """Resets the state of every metric and loss tracker."""
        for m in self.metrics:
            m.reset_state()

    def _logs(self) -> dict[str, Any]:
        return {m.name: m.result() for m in self.metrics}

    # ---- data preparation --------------------------------------------------------------------
    def _as_array(self, a: Any, what: str) -> np.ndarray:
        arr = np.asarray(a)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"{self.name}: {what} must be numeric arrays, received dtype "
                            f"{arr.dtype} ({type(a).__name__})")
        return arr

    def _conform_input(self, a: np.ndarray, spec: TensorSpec) -> np.ndarray:
        want = spec.shape
        if a.ndim == len(want) - 1 and want and want[-1] == 1:
            a = a[..., None]
        elif a.ndim == len(want) + 1 and a.shape[-1] == 1 and a.ndim > 1:
            a = a[..., 0]
        if a.ndim != len(want) or any(w is not None and w != d
                                      for w, d in zip(want[1:], a.shape[1:])):
            raise ValueError(f"{self.name}: input {spec.name!r} expects data of shape "
                             f"{fmt(want)}, received an array of shape {fmt(a.shape)}")
        if a.dtype.name != spec.dtype:
            a = a.astype(spec.dtype)
        return a

    def _standardize_x(self, x: Any) -> list[np.ndarray]:
        flat, struct = flatten_data(x, self._model_input_structure(), self._input_names(),
                                    "x", self.name)
        flat = [self._as_array(a, "x") for a in flat]
        if self._model_input_specs() is None:
            self._build_from_arrays(flat, struct)
        specs = self._model_input_specs()
        assert specs is not None
        if len(specs) != len(flat):
            raise ValueError(f"{self.name}: the model has {len(specs)} inputs, received "
                             f"{len(flat)} arrays for x")
        return [self._conform_input(a, s) for a, s in zip(flat, specs)]

    def _input_names(self) -> list[str] | None:
        specs = self._model_input_specs()
        return None if specs is None else [s.name for s in specs]

    def _standardize_y(self, y: Any) -> list[np.ndarray]:
        flat, _ = flatten_data(y, self._model_output_structure(), self.output_names, "y",
                               self.name)
        return [self._as_array(a, "y") for a in flat]

    def _standardize_sw(self, sample_weight: Any, n_outputs: int) -> list[np.ndarray] | None:
        if sample_weight is None:
            return None
        if isinstance(sample_weight, np.ndarray) or not isinstance(sample_weight, list | tuple
                                                                   | dict):
            flat = [sample_weight] * n_outputs
        else:
            flat, _ = flatten_data(sample_weight, self._model_output_structure(),
                                   self.output_names, "sample_weight", self.name)
        return [self._as_array(a, "sample_weight").astype(kiln.config.floatx()) for a in flat]

    def _target_dtype(self, out: _Output, a: np.ndarray) -> str:
        if out.loss is not None and losses_module.is_sparse_categorical(out.loss):
            return "int64" if a.dtype.itemsize > 4 and a.dtype.kind in "iu" else "int32"
        if out.loss is None and a.dtype.kind in "iu":
            return "int32"
        return kiln.config.floatx()

    def _check_labels(self, ys: list[np.ndarray]) -> None:
        """Sparse labels must lie in [0, classes): checked once over the whole target array."""
        outputs = self._outputs or []
        for o, y, spec in zip(outputs, ys, self._model_output_specs()):
            if o.loss is None or not losses_module.is_sparse_categorical(o.loss) or not y.size:
                continue
            n = spec.shape[-1] if spec.shape else None
            if n is None:
                continue
            lo, hi = y.min(), y.max()
            if hi >= n or lo < 0:
                bad = hi if hi >= n else lo
                raise ValueError(
                    f"{self.name}: received a label value of {bad} for output {o.name!r}, "
                    f"which has {n} classes: sparse_categorical_crossentropy needs integer "
                    f"labels in [0, {n - 1}] (target shape {fmt(y.shape)})")

    def _prepare_arrays(self, x: Any, y: Any, sample_weight: Any, class_weight: Any,
                        need_y: bool) -> tuple[list, list, list]:
        """Standardized x, y and sample-weight arrays (validated: nothing has run yet)."""
        if x is None:
            raise ValueError(f"{self.name}: x is required")
        xs = self._standardize_x(x)
        n = num_samples(xs, [f"x[{s.name!r}]" for s in self._model_input_specs() or []],
                        self.name)
        if n == 0:
            raise ValueError(f"{self.name}: received empty input arrays (0 samples)")
        if y is None:
            if need_y and self._needs_targets():
                raise ValueError(f"{self.name}: the model has a loss, so fit/evaluate need "
                                 "targets `y` (received y=None)")
            if need_y:
                self._resolve_outputs(None)
            return xs, [], []
        ys = self._standardize_y(y)
        sws = self._standardize_sw(sample_weight, len(ys))
        if class_weight is not None:
            cw = self._class_weights(ys, class_weight)
            sws = [cw] if sws is None else [sws[0] * cw]
        labels = [f"x[{s.name!r}]" for s in self._model_input_specs() or []]
        labels += [f"y[{name!r}]" for name in self.output_names[:len(ys)]]
        labels += [f"sample_weight[{i}]" for i in range(len(sws or []))]
        num_samples(xs + ys + (sws or []), labels, self.name)  # equal lengths, or ValueError
        outputs = self._resolve_outputs([TensorSpec((None,) + a.shape[1:],
                                                    "int32" if a.dtype.kind in "iu" else
                                                    "float32") for a in ys])
        ys = [a if a.dtype.name == self._target_dtype(o, a) else
              a.astype(self._target_dtype(o, a)) for o, a in zip(outputs, ys)]
        self._check_labels(ys)
        return xs, ys, sws or []

    def _needs_targets(self) -> bool:
        args = self._compile_args or {}
        return args.get("loss") is not None or bool(args.get("metrics"))

    def _class_weights(self, ys: list[np.ndarray], class_weight: Any) -> np.ndarray:
        if not isinstance(class_weight, dict):
            raise TypeError(f"{self.name}: class_weight must be a dict {{class: weight}}, "
                            f"received {type(class_weight).__name__}")
        if len(ys) != 1:
            raise ValueError(f"{self.name}: class_weight is only supported for models with "
                             f"a single output; this model has {len(ys)}")
        y = ys[0]
        if y.ndim > 1:
            y = np.argmax(y, axis=-1) if y.shape[-1] != 1 else y[..., 0]
        if y.ndim > 1:
            raise ValueError(f"{self.name}: class_weight needs targets of rank 1 or 2, "
                             f"received {fmt(ys[0].shape)}")
        y = np.round(y).astype(np.int64)
        keys = np.array(sorted(int(k) for k in class_weight), dtype=np.int64)
        vals = np.array([float(class_weight[k]) for k in sorted(class_weight, key=int)])
        out = np.ones(len(y), dtype=kiln.config.floatx())
        if len(keys):
            pos = np.searchsorted(keys, y)
            pos = np.clip(pos, 0, len(keys) - 1)
            hit = keys[pos] == y
            out[hit] = vals[pos[hit]]
        return out

    def _item_converter(self, with_y: bool) -> Any:
        """Converts a generator item into feeds, checking labels per batch."""
        def convert(item: Any) -> list:
            x, y, sw = unpack_item(item)
            if not with_y:
                return self._standardize_x(x)
            xs, ys, sws = self._prepare_arrays(x, y, sw, None, need_y=True)
            return xs + ys + sws
        return convert

    # ---- step functions ----------------------------------------------------------------------
    def _function(self, inputs: list, outputs: list, updates: Any, name: str) -> Any:
        kwargs: dict[str, Any] = {"name": name}
        if getattr(self, "_memory_budget", None) is not None:
            kwargs["memory_budget"] = self._memory_budget
        kwargs["batch_size"] = getattr(self, "_plan_batch_size", None)
        return executor.function(inputs, outputs, updates=updates,
                                 backend=getattr(self, "_backend", None), **kwargs)

    def _feed_placeholders(self, y_specs: list[TensorSpec], sw_specs: list[TensorSpec]
                           ) -> tuple[list, list, list]:
        specs = self._model_input_specs()
        assert specs is not None
        x_phs = [placeholder(s.shape, s.dtype, name=s.name) for s in specs]
        names = self.output_names
        y_phs = [placeholder(s.shape, s.dtype, name=f"{names[i]}_target")
                 for i, s in enumerate(y_specs)]
        sw_phs = [placeholder(s.shape, s.dtype, name=f"{names[i]}_sample_weight")
                  for i, s in enumerate(sw_specs)]
        return x_phs, y_phs, sw_phs

    def _loss_and_stats(self, outputs: Any, y_phs: list, sw_phs: list, ctx: Any
                        ) -> tuple[Node, list, list, list]:
        """Total loss, per-output losses (when several outputs), trackers and metric stats."""
        outs = flatten(outputs)
        specs = self._outputs or []
        if len(outs) != len(specs):
            raise ValueError(f"{self.name}: the model returned {len(outs)} outputs, but "
                             f"compile() configured {len(specs)}")
        total: Node | None = None
        out_losses: list[Node] = []
        trackers: list = [self._loss_tracker]
        stats: list[Node] = []
        metric_slices: list = []
        for i, (o, pred) in enumerate(zip(specs, outs)):
            y = y_phs[i] if i < len(y_phs) else None
            sw = sw_phs[i] if i < len(sw_phs) else None
            if o.loss is not None:
                if y is None:
                    raise ValueError(f"{self.name}: output {o.name!r} has a loss but no "
                                     "targets were given")
                try:
                    value = o.loss(y, pred, sw)
                except (ValueError, TypeError) as exc:
                    raise type(exc)(f"{self.name}: loss {o.loss.name!r} of output {o.name!r} "
                                    f"(prediction shape {fmt(pred.shape)}, target shape "
                                    f"{fmt(y.shape)}): {exc}") from exc
                if o.tracker is not None:
                    out_losses.append(value)
                    trackers.append(o.tracker)
                term = value if o.weight == 1.0 else value * o.weight
                total = term if total is None else total + term
            for group, weight in ((o.metrics, None), (o.weighted_metrics, sw)):
                for m in group:
                    if y is None:
                        raise ValueError(f"{self.name}: metric {m.name!r} of output {o.name!r} "
                                         "needs targets")
                    nodes = m.stats(y, pred, weight)
                    metric_slices.append((m, len(stats), len(stats) + len(nodes)))
                    stats.extend(nodes)
        extra = list(self.regularization_losses()) + list(ctx.losses)
        for term in extra:
            term = _scalar(term, self.name)
            total = term if total is None else total + term
        if total is None:
            raise ValueError(f"{self.name}: no loss to compute; pass `loss` to compile() (or "
                             "add losses in call() with add_loss)")
        offset = 1 + len(out_losses)
        metric_slices = [(m, a + offset, b + offset) for m, a, b in metric_slices]
        return total, out_losses, trackers, [stats, metric_slices]

    def _train_step(self, y_specs: list[TensorSpec], sw_specs: list[TensorSpec]) -> _Step:
        key = (tuple((s.shape, s.dtype) for s in y_specs),
               tuple((s.shape, s.dtype) for s in sw_specs))
        step = self._train_fns.get(key)
        if step is not None:
            self.train_function = step.fn
            return step
        if self.optimizer is None:
            self._assert_compiled("fit")
        x_phs, y_phs, sw_phs = self._feed_placeholders(y_specs, sw_specs)
        rng_key = placeholder((2,), "int64", name="rng_key")
        with trace(training=True, rng_key=rng_key) as ctx:
            outputs = self(self._pack_inputs(x_phs), training=True)
        total, out_losses, trackers, (stats, slices) = self._loss_and_stats(
            outputs, y_phs, sw_phs, ctx)
        variables = self.trainable_weights
        if not variables:
            raise ValueError(f"{self.name}: the model has no trainable weights to train")
        self._build_optimizer_if_ready()
        grads = grad(total, variables)
        updates = list(self.optimizer.update_nodes(grads, variables)) + list(ctx.updates)
        outputs_list = [total] + out_losses + stats
        # Feed the random key only when the step uses it (Dropout ...).
        uses_key = depends_on(outputs_list + [v for _, v in updates], rng_key)
        feeds = x_phs + y_phs + sw_phs + ([rng_key] if uses_key else [])
        fn = self._function(feeds, outputs_list, updates, "train_function")
        step = _Step(fn, trackers, slices, uses_key)
        self._train_fns[key] = step
        self.train_function = fn
        return step

    def _test_step(self, y_specs: list[TensorSpec], sw_specs: list[TensorSpec]) -> _Step:
        key = (tuple((s.shape, s.dtype) for s in y_specs),
               tuple((s.shape, s.dtype) for s in sw_specs))
        step = self._test_fns.get(key)
        if step is not None:
            self.test_function = step.fn
            return step
        x_phs, y_phs, sw_phs = self._feed_placeholders(y_specs, sw_specs)
        with trace(training=False) as ctx:
            outputs = self(self._pack_inputs(x_phs), training=False)
        total, out_losses, trackers, (stats, slices) = self._loss_and_stats(
            outputs, y_phs, sw_phs, ctx)
        fn = self._function(x_phs + y_phs + sw_phs, [total] + out_losses + stats, None,
                            "test_function")
        step = _Step(fn, trackers, slices)
        self._test_fns[key] = step
        self.test_function = fn
        return step

    def _predict_fn(self) -> Any:
        fn = self._predict_fns.get("default")
        if fn is None:
            specs = self._model_input_specs()
            assert specs is not None
            x_phs = [placeholder(s.shape, s.dtype, name=s.name) for s in specs]
            with trace(training=False):
                outputs = self(self._pack_inputs(x_phs), training=False)
            fn = self._function(x_phs, list(flatten(outputs)), None, "predict_function")
            self._predict_fns["default"] = fn
        self.predict_function = fn
        return fn

    @staticmethod
    def _specs_of(arrays: list[np.ndarray]) -> list[TensorSpec]:
        return [TensorSpec((None,) + a.shape[1:], a.dtype.name) for a in arrays]

    def _split_specs(self, feeds: list[np.ndarray]) -> tuple[list, list]:
        n_x = len(self._model_input_specs() or [])
        rest = feeds[n_x:]
        n_y = len(self._outputs or [])
        return self._specs_of(rest[:n_y]), self._specs_of(rest[n_y:])

    def _accumulate(self, step: _Step, outs: list, n: int) -> None:
        for i, t in enumerate(step.trackers):
            t.total += float(outs[i]) * n
            t.count += n
        for m, a, b in step.metric_slices:
            m.merge(outs[a:b])

    def compile_report(self) -> Any:
        """The compiler's report (passes, kernels, memory) of the training step; builds the
        train function on demand from the model's input and output shapes."""
        self._assert_compiled("compile_report")
        if self.train_function is None:
            if self._model_input_specs() is None:
                raise ValueError(f"{self.name}: build the model first (call it on data, "
                                 "build(input_shape) or fit())")
            out_specs = self._model_output_specs()
            self._resolve_outputs(None)
            y_specs = []
            for o, s in zip(self._outputs or [], out_specs):
                if o.loss is not None and losses_module.is_sparse_categorical(o.loss):
                    y_specs.append(TensorSpec(s.shape[:-1], "int32"))
                else:
                    y_specs.append(TensorSpec(s.shape, kiln.config.floatx()))
            self._train_step(y_specs, [])
        return self.train_function.report

    # ---- fit ---------------------------------------------------------------------------------
    def _make_adapter(self, x: Any, y: Any, sample_weight: Any, batch_size: int | None,
                      steps: int | None, shuffle: Any, with_y: bool,
                      class_weight: Any = None) -> tuple[Any, list]:
        """An adapter and its first feeds (used to pick the step signature)."""
        if is_iterable_data(x):
            if y is not None:
                raise ValueError(f"{self.name}: when x is a generator/iterable, y must be "
                                 "None (the batches carry the targets)")
            adapter = IterableAdapter(x, self._item_converter(with_y), steps,
                                      shuffle=bool(shuffle))
            first = adapter.convert(adapter.peek())
            return adapter, first
        xs, ys, sws = self._prepare_arrays(x, y, sample_weight, class_weight, need_y=with_y)
        arrays = xs + ys + sws if with_y else xs
        adapter = ArrayAdapter(arrays, batch_size or 32, shuffle, steps)
        return adapter, [a[:1] for a in arrays]

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
            initial_epoch: the epoch to start from (to resume).
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
        batch_size = _positive_int("fit: batch_size", batch_size)
        # The memory plan (and a memory budget) sizes the batch dimension with this.
        self._plan_batch_size = batch_size or 32
        steps_per_epoch = _positive_int("fit: steps_per_epoch", steps_per_epoch)
        validation_batch_size = _positive_int("fit: validation_batch_size",
                                              validation_batch_size)
        if isinstance(epochs, bool) or not isinstance(epochs, int | np.integer) or epochs < 0:
            raise ValueError(f"fit: epochs must be a non-negative integer, received {epochs!r}")
        if isinstance(validation_split, bool) or not isinstance(
                validation_split, int | float) or not 0.0 <= validation_split < 1.0:
            raise ValueError("fit: validation_split must be a float in [0, 1), received "
                             f"{validation_split!r}")
        verbose = _resolve_verbose(verbose)
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
        self._initial_epoch = self._initial_step = self._initial_metric_states = None
        callbacks.on_train_begin()
        # A callback restoring a backup (BackupAndRestore) says where to continue, and may
        # have restored the random state: read both after on_train_begin.
        initial_epoch = self._initial_epoch if self._initial_epoch is not None else \
            initial_epoch
        skip = int(self._initial_step or 0)
        rng_key = np.array([self._rng_seed or 0, 0], dtype=np.int64)
        try:
            self._fit_epochs(train, val, step, callbacks, initial_epoch, epochs, skip,
                             validation_freq, rng_key, batch_begin, batch_end)
        finally:
            self._initial_epoch = self._initial_step = self._initial_metric_states = None
        history = _find_history(callbacks)
        if history is not None:
            self.history = history
        return self.history

    def _fit_epochs(self, train: Any, val: Any, step: _Step, callbacks: Any,
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

    def _validation_adapter(self, validation_data: Any, batch_size: int | None,
                            steps: int | None) -> tuple[Any, list]:
        if is_iterable_data(validation_data):
            return self._make_adapter(validation_data, None, None, batch_size, steps, False,
                                      True)
        if not isinstance(validation_data, list | tuple) or len(validation_data) not in (2, 3):
            raise ValueError("fit: validation_data must be a tuple (x_val, y_val) or (x_val, "
                             "y_val, val_sample_weight), or an iterable of batches; received "
                             f"{type(validation_data).__name__}")
        vx, vy = validation_data[0], validation_data[1]
        vsw = validation_data[2] if len(validation_data) == 3 else None
        return self._make_adapter(vx, vy, vsw, batch_size, steps, False, True)

    def _callback_list(self, callbacks: Any, verbose: int, epochs: int, steps: int | None,
                       add_history: bool = False) -> Any:
        from kiln import callbacks as callbacks_module

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
        batch_size = _positive_int("evaluate: batch_size", batch_size)
        steps = _positive_int("evaluate: steps", steps)
        verbose = _resolve_verbose(verbose)
        if isinstance(x, ArrayAdapter | IterableAdapter):
            adapter = x
            if isinstance(adapter, ArrayAdapter):
                first = [a[:1] for a in adapter.arrays]
            else:
                first = None
        else:
            adapter, first = self._make_adapter(x, y, sample_weight, batch_size, steps, False,
                                                True)
        if first is not None:
            y_specs, sw_specs = self._split_specs(first)
            step = self._test_step(y_specs, sw_specs)
        else:
            step = None
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
        batch_size = _positive_int("predict: batch_size", batch_size)
        steps = _positive_int("predict: steps", steps)
        verbose = _resolve_verbose(verbose)
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
    def _batch_step(self, mode: str, x: Any, y: Any, sample_weight: Any, class_weight: Any
                    ) -> tuple[Any, list]:
        """The step (or predict function) and the feeds for one ``*_on_batch`` call.

        A single array ``x`` (and ``y``) whose signature was seen before skips the general
        standardization: only the dtype conversion and the label-range check remain, so a
        loop of ``train_on_batch`` costs little more than the compiled step itself.
        """
        fast = (sample_weight is None and class_weight is None and type(x) is np.ndarray
                and (y is None or type(y) is np.ndarray))
        if fast:
            key = (mode, x.shape[1:], x.dtype.str, None if y is None else
                   (y.shape[1:], y.dtype.str))
            entry = self._batch_cache.get(key)
            if entry is not None and len(x) and (y is None or len(y) == len(x)):
                step, xd, yd, n_classes = entry
                feeds = [x if x.dtype == xd else x.astype(xd)]
                if y is not None and yd is not None:
                    feeds.append(y if y.dtype == yd else y.astype(yd))
                    if n_classes is not None and (y.min() < 0 or y.max() >= n_classes):
                        entry = None  # the general path raises the error
                if entry is not None:
                    return step, feeds
        if mode == "predict":
            xs, ys, sws = self._standardize_x(x), [], []
            step = self._predict_fn()
        else:
            xs, ys, sws = self._prepare_arrays(x, y, sample_weight, class_weight, need_y=True)
            make = self._train_step if mode == "train" else self._test_step
            step = make(self._specs_of(ys), self._specs_of(sws))
        if fast and len(xs) == 1 and len(ys) <= 1 and not sws and xs[0].shape == x.shape and (
                not ys or ys[0].shape == y.shape):
            n_classes = None
            outs = self._outputs or []
            if ys and outs and outs[0].loss is not None and \
                    losses_module.is_sparse_categorical(outs[0].loss):
                n_classes = self._model_output_specs()[0].shape[-1]
            self._batch_cache[key] = (step, xs[0].dtype, ys[0].dtype if ys else None,
                                      n_classes)
        return step, xs + ys + sws

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
def _scalar(term: Any, model_name: str) -> Node:
    from kiln.core.ops._rules import as_node

    node = as_node(term)
    if node.ndim:
        from kiln import ops

        node = ops.sum(node)
    return node


def _check_metric(identifier: Any) -> Any:
    if isinstance(identifier, str) and identifier.lower() in ("accuracy", "acc"):
        return identifier
    return metrics_module.get(identifier)


def _map_leaves(value: Any, fn: Any, what: str) -> Any:
    """Applies ``fn`` to every leaf of a loss/metrics argument (None, leaf, list, dict)."""
    if value is None:
        return None
    if isinstance(value, dict) and not _is_config(value):
        return {k: _map_leaves(v, fn, what) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_map_leaves(v, fn, what) for v in value]
    return fn(value)


def _is_config(value: dict) -> bool:
    """A serialized object (``{"class_name", "config"}``), not a per-output dict."""
    return "class_name" in value and "config" in value


def _per_output(value: Any, names: list[str], what: str, model_name: str) -> list:
    n = len(names)
    if isinstance(value, dict) and not _is_config(value):
        unknown = [k for k in value if k not in names]
        if unknown:
            raise ValueError(f"{model_name}: {what} has keys {unknown} that are not output "
                             f"names; the outputs are {names}")
        return [value.get(k) for k in names]
    if isinstance(value, list | tuple):
        if len(value) != n:
            raise ValueError(f"{model_name}: {what} is a list of {len(value)} entries, but the "
                             f"model has {n} outputs {names}")
        return list(value)
    return [value] * n


def _per_output_metrics(value: Any, names: list[str], model_name: str) -> list[list]:
    n = len(names)
    if value is None:
        return [[] for _ in names]
    if isinstance(value, dict) and not _is_config(value):
        unknown = [k for k in value if k not in names]
        if unknown:
            raise ValueError(f"{model_name}: metrics has keys {unknown} that are not output "
                             f"names; the outputs are {names}")
        return [_as_list(value.get(k)) for k in names]
    if isinstance(value, list | tuple):
        if n > 1 and len(value) == n and all(isinstance(v, list | tuple) or v is None
                                             for v in value):
            return [_as_list(v) for v in value]
        return [list(value) for _ in names]
    return [[value] for _ in names]


def _as_list(v: Any) -> list:
    if v is None:
        return []
    return list(v) if isinstance(v, list | tuple) else [v]


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
    from kiln import callbacks as callbacks_module

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
    from kiln import callbacks as callbacks_module

    for cb in getattr(callbacks, "callbacks", []) or []:
        if isinstance(cb, callbacks_module.History):
            return cb
    return getattr(callbacks, "_history", None)


__all__ = ["Trainer"]
