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
from kiln.models.data import (
    ArrayAdapter,
    IterableAdapter,
    TensorSpec,
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

    def _target_dtype(self, out: Any, a: np.ndarray) -> str:
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
                    f"labels in [0, {n - 1}] (target shape {format_shape(y.shape)})")

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
    def _item_converter(self, with_y: bool) -> Any:
        """Converts a generator item into feeds, checking labels per batch."""
        def convert(item: Any) -> list:
            x, y, sw = unpack_item(item)
            if not with_y:
                return self._standardize_x(x)
            xs, ys, sws = self._prepare_arrays(x, y, sw, None, need_y=True)
            return xs + ys + sws
        return convert

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

    @staticmethod
    def _specs_of(arrays: list[np.ndarray]) -> list[TensorSpec]:
        return [TensorSpec((None,) + a.shape[1:], a.dtype.name) for a in arrays]

    def _split_specs(self, feeds: list[np.ndarray]) -> tuple[list, list]:
        """The target and sample-weight specs of a feed list (its x feeds come first)."""
        n_x = len(self._model_input_specs() or [])
        rest = feeds[n_x:]
        n_y = len(self._outputs or [])
        return self._specs_of(rest[:n_y]), self._specs_of(rest[n_y:])


__all__ = ["StandardizeMixin"]
