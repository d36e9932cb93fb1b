"""From user data to feeds: the model's input/output structure as the trainer sees it, and the
checks and conversions that turn ``x``, ``y``, ``sample_weight`` and ``class_weight`` into
the flat, typed arrays a compiled step takes (all before any weight changes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.config
from kiln import losses as losses_module
from kiln.core import format_shape, placeholder
from kiln.layers.base import flatten
from kiln.layers.context import trace
from kiln.models.compile_utils import _per_output
from kiln.models.data import (
    ArrayAdapter,
    IterableAdapter,
    TensorSpec,
    check_finite,
    flatten_data,
    is_iterable_data,
    num_samples,
    pack,
    structure_of,
    unpack_item,
)


class StandardizeMixin:
    """The model's structure seen by the trainer, and data standardization."""

    # ---- model structure (Functional and Sequential override these) ----------------------
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
        if self.run_eagerly and self._eager_buildable():
            return self._eager_output_specs()
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
        if self.run_eagerly and self._eager_buildable():  # no symbolic trace of call()
            return self._eager_build(flat, specs, structure)
        self._symbolic_build(pack(specs, structure))
        self._build_optimizer_if_ready()

    # ---- x, y, sample_weight ---------------------------------------------------------------
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
                             f"{format_shape(want)}, received an array of shape "
                             f"{format_shape(a.shape)}")
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
        y = self._targets_of_losses(y)
        flat, _ = flatten_data(y, self._model_output_structure(), self.output_names, "y",
                               self.name)
        return [self._as_array(a, "y") for a in flat]

    def _targets_of_losses(self, y: Any) -> Any:
        """Keras' targets for a loss defined over some outputs only (``loss=[fn, None]``):
        ``y`` holds one array per output that has a loss, in order; the outputs without a loss
        get an unused placeholder target (a zeros vector of the batch)."""
        if y is None or isinstance(y, dict) or self._model_output_structure()[0] == "dict":
            return y
        given = [y] if not isinstance(y, list | tuple) else list(y)
        losses = self._output_losses()
        with_loss = [i for i, loss in enumerate(losses) if loss is not None]
        if len(losses) < 2 or len(given) == len(losses) or len(given) != len(with_loss):
            return y
        rows = len(given[0]) if hasattr(given[0], "__len__") else 0
        out: list = [np.zeros((rows,), kiln.config.floatx()) for _ in losses]
        for i, a in zip(with_loss, given):
            out[i] = a
        return out

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

    def _target_dtype(self, out: Any, a: np.ndarray) -> str:
        if out.loss is not None and losses_module.is_sparse_categorical(out.loss):
            return "int64" if a.dtype.itemsize > 4 and a.dtype.kind in "iu" else "int32"
        if out.loss is None and a.dtype.kind in "iu":
            return "int32"
        return kiln.config.floatx()

    def _output_losses(self) -> list:
        """The loss object of each output (None where it has none), without resolving the
        outputs: a refused target must not fix the metrics chosen from its shape."""
        if self._outputs is not None:
            return [o.loss for o in self._outputs]
        per_loss = _per_output((self._compile_args or {}).get("loss"), self.output_names,
                               "loss", self.name)
        return [losses_module.as_loss_object(loss) for loss in per_loss]

    def _check_targets(self, ys: list[np.ndarray]) -> None:
        """Each target's shape against its output's (for kiln's own losses, which would
        otherwise broadcast a (64, 3) target against a (64, 1) output), and sparse labels:
        finite integers in [0, classes), checked before their conversion to int."""
        names = self.output_names
        for name, loss, y, spec in zip(names, self._output_losses(), ys,
                                       self._model_output_specs()):
            rule = None if loss is None else losses_module.target_rule(loss)
            if rule is None:
                continue
            out = spec.shape
            if rule == "sparse":
                wants = [out[:-1], out[:-1] + (1,)]
                hint = ("integer class labels; for one-hot targets use "
                        "categorical_crossentropy")
            else:
                wants = [out] + ([out[:-1]] if out and out[-1] == 1 else []) + [out + (1,)]
                hint = "the output's shape, with or without a trailing axis of 1"
            if not any(_shape_matches(y.shape, w) for w in wants):
                raise ValueError(
                    f"{self.name}: target y[{name!r}] of shape {format_shape(y.shape)} does not "
                    f"match output {name!r} of shape {format_shape(out)} (loss "
                    f"{getattr(loss, 'name', loss)!r} expects "
                    f"{' or '.join(format_shape(w) for w in wants)}: {hint})")
            if rule == "sparse" and y.size:
                self._check_labels(name, y, out[-1] if out else None)

    def _check_labels(self, name: str, y: np.ndarray, n: int | None) -> None:
        """Sparse labels must be integers in [0, n): checked once over the whole array."""
        def refuse(value: Any, what: str, index: tuple) -> None:
            has = "" if n is None else f", which has {n} classes"
            raise ValueError(
                f"{self.name}: received {what} {value} for output {name!r}{has} (at index "
                f"{index} of the target, shape {format_shape(y.shape)}): "
                "sparse_categorical_crossentropy needs integer labels"
                + ("" if n is None else f" in [0, {n - 1}]"))

        if y.dtype.kind in "fc":
            for bad, what in ((~np.isfinite(y), "a label value of"),
                              (y != np.round(y), "a non-integer label value of")):
                if bad.any():
                    index = tuple(int(i) for i in np.argwhere(bad)[0])
                    refuse(y[index], what, index)
        if n is None:
            return
        lo, hi = y.min(), y.max()
        if hi >= n or lo < 0:
            index = tuple(int(i) for i in np.argwhere((y >= n) | (y < 0))[0])
            refuse(y[index], "a label value of", index)

    def _prepare_arrays(self, x: Any, y: Any, sample_weight: Any, class_weight: Any,
                        need_y: bool, check: bool = False, where: str = ""
                        ) -> tuple[list, list, list]:
        """Standardized x, y and sample-weight arrays (validated: nothing has run yet).

        ``check``: refuse NaN/inf in them (``fit``/``evaluate``'s ``check_finite``); ``where``
        tells the message what the data is (`` (validation data)``)."""
        if x is None:
            raise ValueError(f"{self.name}: x is required")
        xs = self._standardize_x(x)
        x_labels = [f"x[{s.name!r}]" for s in self._model_input_specs() or []]
        n = num_samples(xs, x_labels, self.name)
        if n == 0:
            raise ValueError(f"{self.name}: received empty input arrays (0 samples)")
        if y is None:
            if need_y and self._needs_targets():
                raise ValueError(f"{self.name}: the model has a loss, so fit/evaluate need "
                                 "targets `y` (received y=None)")
            if check:
                check_finite(xs, x_labels, self.name, where)
            if need_y:
                self._resolve_outputs(None)
            return xs, [], []
        ys = self._standardize_y(y)
        sws = self._standardize_sw(sample_weight, len(ys))
        labels = x_labels + [f"y[{name!r}]" for name in self.output_names[:len(ys)]]
        labels += [f"sample_weight[{i}]" for i in range(len(sws or []))]
        num_samples(xs + ys + (sws or []), labels, self.name)  # equal lengths, or ValueError
        self._check_targets(ys)
        if check:
            check_finite(xs + ys + (sws or []), labels, self.name, where)
        if class_weight is not None:
            cw = self._class_weights(ys, class_weight)
            if check:
                check_finite([cw], ["the sample weights from class_weight"], self.name, where)
            sws = [cw] if sws is None else [sws[0] * cw]
        outputs = self._resolve_outputs([TensorSpec((None,) + a.shape[1:],
                                                    "int32" if a.dtype.kind in "iu" else
                                                    "float32") for a in ys])
        ys = [a if a.dtype.name == self._target_dtype(o, a) else
              a.astype(self._target_dtype(o, a)) for o, a in zip(outputs, ys)]
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
                             f"received {format_shape(ys[0].shape)}")
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

    # ---- adapters ----------------------------------------------------------------------------
    def _item_converter(self, with_y: bool, check: bool = False, where: str = "") -> Any:
        """Converts a generator item into feeds, checking labels (and with ``check``,
        finiteness) per batch."""
        def convert(item: Any) -> list:
            x, y, sw = unpack_item(item)
            if not with_y:
                return self._standardize_x(x)
            xs, ys, sws = self._prepare_arrays(x, y, sw, None, need_y=True, check=check,
                                               where=where)
            return xs + ys + sws
        return convert

    def _make_adapter(self, x: Any, y: Any, sample_weight: Any, batch_size: int | None,
                      steps: int | None, shuffle: Any, with_y: bool,
                      class_weight: Any = None, check_finite: bool = False,
                      where: str = "") -> tuple[Any, list]:
        """An adapter and its first feeds (used to pick the step signature).

        ``check_finite`` (``fit``/``evaluate``'s argument): arrays are checked for NaN/inf
        here, once; batches of a generator as they arrive."""
        check = check_finite and with_y
        if is_iterable_data(x):
            if y is not None:
                raise ValueError(f"{self.name}: when x is a generator/iterable, y must be "
                                 "None (the batches carry the targets)")
            adapter = IterableAdapter(x, self._item_converter(with_y, check, where), steps,
                                      shuffle=bool(shuffle))
            first = adapter.convert(adapter.peek())
            return adapter, first
        xs, ys, sws = self._prepare_arrays(x, y, sample_weight, class_weight, need_y=with_y,
                                           check=check, where=where)
        arrays = xs + ys + sws if with_y else xs
        adapter = ArrayAdapter(arrays, batch_size or 32, shuffle, steps)
        return adapter, [a[:1] for a in arrays]

    def _validation_adapter(self, validation_data: Any, batch_size: int | None,
                            steps: int | None, check_finite: bool = False
                            ) -> tuple[Any, list]:
        where = " (validation data)"
        if is_iterable_data(validation_data):
            return self._make_adapter(validation_data, None, None, batch_size, steps, False,
                                      True, check_finite=check_finite, where=where)
        if not isinstance(validation_data, list | tuple) or len(validation_data) not in (2, 3):
            raise ValueError("fit: validation_data must be a tuple (x_val, y_val) or (x_val, "
                             "y_val, val_sample_weight), or an iterable of batches; received "
                             f"{type(validation_data).__name__}")
        vx, vy = validation_data[0], validation_data[1]
        vsw = validation_data[2] if len(validation_data) == 3 else None
        return self._make_adapter(vx, vy, vsw, batch_size, steps, False, True,
                                  check_finite=check_finite, where=where)

    @staticmethod
    def _specs_of(arrays: list[np.ndarray]) -> list[TensorSpec]:
        return [TensorSpec((None,) + a.shape[1:], a.dtype.name) for a in arrays]

    def _split_specs(self, feeds: list[np.ndarray]) -> tuple[list, list]:
        """The target and sample-weight specs of a feed list (its x feeds come first)."""
        n_x = len(self._model_input_specs() or [])
        # the x sizes of this batch: a step that cannot be traced for unknown sizes is traced
        # for these (step_graphs.py, _with_static_inputs)
        self.__dict__["_x_feed_dims"] = tuple(tuple(np.shape(a)[1:]) for a in feeds[:n_x])
        rest = feeds[n_x:]
        n_y = len(self._outputs or [])
        return self._specs_of(rest[:n_y]), self._specs_of(rest[n_y:])


def _shape_matches(shape: tuple, want: tuple) -> bool:
    """``shape`` (an array's) fits ``want`` (None dims fit any size)."""
    return len(shape) == len(want) and all(w is None or w == d for d, w in zip(shape, want))


__all__ = ["StandardizeMixin"]
