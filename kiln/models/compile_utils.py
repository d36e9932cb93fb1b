"""What ``compile()`` decides: argument checks, the optimizer, and which loss, loss weight and
metrics go with each model output (resolved once, at the first fit/evaluate, when the target
shapes are known).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.config
from kiln import losses as losses_module
from kiln import metrics as metrics_module
from kiln import optimizers
from kiln.core import backend_for_device
from kiln.models.data import TensorSpec
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


class CompileMixin:
    """``compile``, its config round trip, and the per-output losses and metrics."""

    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, loss_weights: Any = None,
                metrics: Any = None, weighted_metrics: Any = None,
                run_eagerly: bool = False, steps_per_execution: int = 1,
                jit_compile: Any = "auto", auto_scale_loss: bool = True, *,
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
            run_eagerly: run the steps define-by-run, op by op on arrays, for debugging
                (``Model.run_eagerly``; kiln/models/eager_loop.py, docs/debugging.md).
            jit_compile, auto_scale_loss: accepted for Keras compatibility.
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
        if isinstance(steps_per_execution, bool) or not isinstance(
                steps_per_execution, int | np.integer) or steps_per_execution < 1:
            raise ValueError(f"{self.name}: compile: steps_per_execution must be an int >= 1, "
                             f"received steps_per_execution={steps_per_execution!r}")
        opt = optimizers.get(optimizer)
        map_leaves(loss, losses_module.get, "loss")
        for ms in (metrics, weighted_metrics):
            map_leaves(ms, _check_metric, "metrics")
        if loss_weights is not None and not isinstance(loss_weights, list | tuple | dict
                                                        | int | float):
            raise TypeError(f"{self.name}: loss_weights must be a list, a dict or a number, "
                            f"received {type(loss_weights).__name__}")
        backend = backend_for(device)
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
        self.__dict__["_run_eagerly"] = bool(run_eagerly)
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
        args = self._compile_args or {}
        return {"optimizer": optimizers.serialize(self.optimizer),
                "loss": map_leaves(args.get("loss"), losses_module.serialize, "loss"),
                "metrics": map_leaves(args.get("metrics"), metrics_module.serialize,
                                      "metrics"),
                "loss_weights": args.get("loss_weights"),
                "weighted_metrics": map_leaves(args.get("weighted_metrics"),
                                               metrics_module.serialize, "metrics"),
                "steps_per_execution": int(args.get("steps_per_execution", 1))}

    def compile_from_config(self, config: dict, custom_objects: dict | None = None) -> None:
        """Compiles the model from :meth:`get_compile_config`'s output."""
        config = dict(config)
        opt = config.get("optimizer", "rmsprop")
        if isinstance(opt, dict):
            opt = optimizers.deserialize(opt, custom_objects)

        def de_loss(x: Any) -> Any:
            return losses_module.deserialize(x, custom_objects)

        def de_metric(x: Any) -> Any:
            return metrics_module.deserialize(x, custom_objects)

        self.compile(optimizer=opt,
                     loss=map_leaves(config.get("loss"), de_loss, "loss"),
                     metrics=map_leaves(config.get("metrics"), de_metric, "metrics"),
                     loss_weights=config.get("loss_weights"),
                     weighted_metrics=map_leaves(config.get("weighted_metrics"), de_metric,
                                                 "metrics"),
                     steps_per_execution=1 if config.get("steps_per_execution") is None
                     else config["steps_per_execution"])

    # ---- per-output configuration ------------------------------------------------------------
    def _resolve_outputs(self, y_specs: list[TensorSpec] | None) -> list[_Output]:
        """Attaches losses, loss weights and metrics to the model's outputs (once)."""
        if self._outputs is not None:
            return self._outputs
        args = self._compile_args or {}
        names = self.output_names
        out_specs = self._model_output_specs()
        n = len(names)
        per_loss = _per_output(args.get("loss"), names, "loss", self.name)
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
            ms = [self._make_metric(m, loss_obj, y_spec, out_specs[i], n, name, used)
                  for m in per_metrics[i]]
            wms = [self._make_metric(m, loss_obj, y_spec, out_specs[i], n, name, used)
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
                     out_spec: TensorSpec, n_outputs: int, out_name: str,
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
        # metrics updated in the model's call() (kiln/models/step_graphs.py)
        out.extend(m for m in self.__dict__.get("_layer_metrics", ())
                   if all(m is not k for k in out))
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


# ---- argument checks ---------------------------------------------------------------------------
def resolve_verbose(verbose: Any) -> int:
    if verbose == "auto":
        return 1
    if isinstance(verbose, bool) or not isinstance(verbose, int) or verbose not in (0, 1, 2):
        raise ValueError(f"verbose must be 'auto', 0, 1 or 2, received {verbose!r}")
    return verbose


def positive_int(name: str, value: Any) -> int | None:
    """``value`` as an int (None stays None); ValueError unless it is a positive integer."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, received {value!r}")
    return int(value)


def backend_for(device: Any) -> str | None:
    """The backend for ``compile(device=...)`` (None: KILN_DEVICE, default "cpu"); None means
    the default backend."""
    device = kiln.config.device() if device is None else device
    if device == "reference":
        return "reference"
    if device == "gpu":
        device = "cuda"
    if device not in ("cpu", "cuda", "auto"):
        raise ValueError(f"compile: device must be None, 'cpu', 'cuda', 'auto' or "
                         f"'reference', received {device!r}")
    name = backend_for_device(device)
    return None if name == kiln.config.default_backend() else name


def _check_metric(identifier: Any) -> Any:
    if isinstance(identifier, str) and identifier.lower() in ("accuracy", "acc"):
        return identifier
    return metrics_module.get(identifier)


# ---- per-output arguments ----------------------------------------------------------------------
def map_leaves(value: Any, fn: Any, what: str) -> Any:
    """Applies ``fn`` to every leaf of a loss/metrics argument (None, leaf, list, dict)."""
    if value is None:
        return None
    if isinstance(value, dict) and not _is_config(value):
        return {k: map_leaves(v, fn, what) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [map_leaves(v, fn, what) for v in value]
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


__all__ = ["CompileMixin", "resolve_verbose", "positive_int", "backend_for", "map_leaves"]
