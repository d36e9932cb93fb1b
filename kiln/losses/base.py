"""The Loss base class, reductions, and the helpers every loss family shares.

A loss *function* ``fn(y_true, y_pred)`` returns per-sample values (the last axis reduced); a
loss *object* applies a sample weight and a reduction and returns a scalar. Both accept
symbolic tensors or NumPy arrays; on arrays they run through kiln's one eager path
(:mod:`kiln.eager`: traced on placeholders, compiled and cached per input signature).
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

import numpy as np

import kiln.config
import kiln.ops as K
from kiln import eager as eager_path
from kiln.core import Node, convert_to_tensor, format_shape, is_tensor
from kiln.layers.base import get_mask

EPSILON = 1e-7
REDUCTIONS = ("sum_over_batch_size", "sum", "none", "mean", "mean_with_sample_weight")


# ---- helpers --------------------------------------------------------------------------------
def _symbolic(*xs: Any) -> bool:
    return any(is_tensor(x) or hasattr(x, "__kiln_node__") for x in xs)


def _to_node(x: Any, dtype: str | None = None) -> Node:
    """A node for ``x``; NumPy floats become floatx constants, ints stay ints."""
    if is_tensor(x) or hasattr(x, "__kiln_node__"):
        node = convert_to_tensor(x)
    else:
        arr = np.asarray(x)
        if arr.dtype.kind == "f" or arr.dtype.kind == "b":
            arr = arr.astype(kiln.config.floatx())
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.int64 if arr.dtype.itemsize > 4 else np.int32)
        else:
            raise TypeError(f"expected a numeric array, received dtype {arr.dtype}")
        node = K.constant(arr)
    if dtype is not None and node.dtype != dtype:
        node = K.cast(node, dtype)
    return node


def _float(x: Node) -> Node:
    return x if x.dtype in ("float32", "float64") else K.cast(x, kiln.config.floatx())


def eager(fn: Callable) -> Callable:
    """Lets a graph-building loss/metric function also run on NumPy arrays: compiled once per
    input signature and arguments (:func:`kiln.eager.run`), floats in floatx."""
    @functools.wraps(fn)
    def wrapper(y_true: Any, y_pred: Any, *args: Any, **kwargs: Any) -> Any:
        if _symbolic(y_true, y_pred):
            return fn(y_true, y_pred, *args, **kwargs)
        key = (fn, repr(args), repr(sorted(kwargs.items())))
        return eager_path.run(key, lambda t, p: fn(t, p, *args, **kwargs), [y_true, y_pred],
                              kiln.config.floatx(), batch=None, name=fn.__name__,
                              who=fn.__name__)
    return wrapper


def squeeze_or_expand_to_same_rank(x1: Node, x2: Node, expand_rank_1: bool = True
                                   ) -> tuple[Node, Node]:
    """Keras' rule: when ranks differ by one and the longer has a last axis of 1, squeeze it
    (or expand a rank-1 partner)."""
    r1, r2 = x1.ndim, x2.ndim
    if r1 == r2:
        return x1, x2
    if r1 == r2 + 1 and x1.shape[-1] == 1:
        if r2 == 1 and expand_rank_1:
            x2 = K.expand_dims(x2, -1)
        else:
            x1 = K.squeeze(x1, -1)
    elif r2 == r1 + 1 and x2.shape[-1] == 1:
        if r1 == 1 and expand_rank_1:
            x1 = K.expand_dims(x1, -1)
        else:
            x2 = K.squeeze(x2, -1)
    return x1, x2


def _align(name: str, y_true: Any, y_pred: Any, cast_true: bool = True) -> tuple[Node, Node]:
    """Converts, casts ``y_true`` to ``y_pred``'s float dtype and matches ranks; raises a
    ValueError naming the loss when the shapes cannot match."""
    y_pred = _float(_to_node(y_pred))
    y_true = _to_node(y_true)
    if cast_true and y_true.dtype != y_pred.dtype:
        y_true = K.cast(y_true, y_pred.dtype)
    y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)
    ok = y_true.ndim == y_pred.ndim and all(
        a is None or b is None or a == b or a == 1 or b == 1
        for a, b in zip(y_true.shape, y_pred.shape))
    if not ok:
        raise ValueError(f"{name}: y_true of shape {format_shape(y_true.shape)} does not match "
                         f"y_pred of shape {format_shape(y_pred.shape)}")
    return y_true, y_pred


def _c(value: float, like: Node) -> Node:
    return K.constant(np.asarray(value, dtype=like.dtype))


def _peel(x: Node) -> Node:
    """Looks through ``identity`` nodes (the functional API tags layer outputs with them)."""
    while x.op == "identity":
        x = x.inputs[0]
    return x


def _softmax_logits(y_pred: Node) -> Node | None:
    """The input of ``y_pred`` when it is a softmax over the last axis, else None."""
    node = _peel(y_pred)
    if node.op == "softmax" and node.attrs.get("axis") == node.ndim - 1:
        return node.inputs[0]
    return None


def _sigmoid_logits(y_pred: Node) -> Node | None:
    node = _peel(y_pred)
    return node.inputs[0] if node.op == "sigmoid" else None


# ---- reduction ------------------------------------------------------------------------------
def standardize_reduction(reduction: Any) -> str:
    if reduction is None:
        return "none"
    if reduction == "auto":
        return "sum_over_batch_size"
    if reduction not in REDUCTIONS:
        raise ValueError(f"Invalid value for argument `reduction`: {reduction!r}; expected "
                         f"one of {', '.join(map(repr, REDUCTIONS))} or None")
    return reduction


def reduce_weighted_values(values: Node, sample_weight: Any = None,
                           reduction: str = "sum_over_batch_size") -> Node:
    """Weights per-sample values and reduces them, like Keras' ``reduce_weighted_values``:
    ``"sum_over_batch_size"`` divides the weighted sum by the number of values."""
    reduction = standardize_reduction(reduction)
    values = _float(values)
    if sample_weight is not None:
        sw = _to_node(sample_weight, values.dtype)
        values, sw = squeeze_or_expand_to_same_rank(values, sw)
        while sw.ndim < values.ndim:
            sw = K.expand_dims(sw, -1)
        values = values * sw
    else:
        sw = None
    if reduction == "none" or values.ndim == 0:
        return values
    if reduction == "sum":
        return K.sum(values)
    # The means divide before they sum: the mean of losses near float32's maximum (a
    # cross-entropy from logits of 3e38) is finite, where their sum is not.
    if reduction == "mean_with_sample_weight" and sw is not None:
        divisor = K.sum(K.broadcast_like(sw, values))
        return K.sum(values / K.maximum(divisor, _c(1e-12, divisor)))
    return K.sum(values / K.size_of(values))


def mask_weights(mask: Node, sample_weight: Any, values: Node, reduction: str) -> Node:
    """Keras' ``apply_mask``: masked entries weigh 0; for a mean, the valid ones weigh
    ``total / valid``, so the mean is over the unmasked entries only (0 when none is)."""
    m = K.cast(mask, values.dtype)
    if standardize_reduction(reduction) in ("sum_over_batch_size", "mean"):
        total = K.cast(K.size_of(m), values.dtype)
        valid = K.sum(m)
        m = m * (total / K.maximum(valid, _c(1.0, valid)))
    if sample_weight is None:
        return m
    sw = _to_node(sample_weight, values.dtype)
    m, sw = squeeze_or_expand_to_same_rank(m, sw)
    while sw.ndim < m.ndim:
        sw = K.expand_dims(sw, -1)
    return m * sw


# ---- loss objects ---------------------------------------------------------------------------
def _builtin(obj: Any, package: str) -> bool:
    """Whether ``obj``'s class is one of kiln's own (its graph follows from its config)."""
    return type(obj).__module__.split(".")[:2] == ["kiln", package]


class Loss:
    """Base class of loss objects: ``loss(y_true, y_pred, sample_weight=None)`` -> scalar.

    Args:
        name: the loss' name.
        reduction: ``"sum_over_batch_size"`` (default), ``"sum"``, ``"mean"``,
            ``"mean_with_sample_weight"`` or ``"none"``/None (per-sample values).
        dtype: accepted for Keras compatibility (losses compute in the prediction's dtype).

    Subclasses implement ``call(y_true, y_pred)`` returning per-sample values as nodes. On
    NumPy arrays the loss is compiled once per input signature (:mod:`kiln.eager`); kiln's
    own losses share compiled functions by config, others keep their own.

    Example:
        >>> class MyLoss(kiln.losses.Loss):
        ...     def call(self, y_true, y_pred):
        ...         return kiln.ops.mean(kiln.ops.abs(y_true - y_pred) ** 3, axis=-1)
    """

    def __init__(self, name: str | None = None, reduction: Any = "sum_over_batch_size",
                 dtype: Any = None):
        from kiln.layers.naming import snake_case

        self.name = name or snake_case(type(self).__name__)
        self.reduction = standardize_reduction(reduction)
        self.dtype = dtype

    def call(self, y_true: Node, y_pred: Node) -> Node:
        raise NotImplementedError(f"{type(self).__name__} must implement call()")

    def _reduced(self, y_true: Node, y_pred: Node, sample_weight: Any = None) -> Node:
        mask = get_mask(y_pred)  # a Keras mask on the prediction (a masked sequence model)
        values = convert_to_tensor(self.call(y_true, y_pred))
        out_mask = get_mask(values)  # the loss' own (sparse CE's ignore_class), as in Keras
        if out_mask is not None:
            mask = out_mask if mask is None else K.logical_and(mask, out_mask)
        if mask is not None:
            sample_weight = mask_weights(mask, sample_weight, values, self.reduction)
        return reduce_weighted_values(values, sample_weight, self.reduction)

    def _graph_key(self) -> tuple:
        config = json.dumps(self.get_config(), sort_keys=True, default=repr)
        return (type(self), config)

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        from kiln.layers.jax_bridge import has_tracer
        if has_tracer(y_true, y_pred, sample_weight):  # inside jax.grad (jax_bridge.py)
            return _jax_loss(self, y_true, y_pred, sample_weight)
        if _symbolic(y_true, y_pred, sample_weight):
            return self._reduced(_to_node(y_true), _to_node(y_pred), sample_weight)
        arrays = [y_true, y_pred] + ([] if sample_weight is None else [sample_weight])
        return eager_path.run(self._graph_key(), self._reduced, arrays, kiln.config.floatx(),
                              owner=None if _builtin(self, "losses") else self, batch=None,
                              name=self.name, who=self.name)

    def get_config(self) -> dict:
        return {"name": self.name, "reduction": self.reduction}

    @classmethod
    def from_config(cls, config: dict) -> Loss:
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r}>"


def _jax_loss(loss: Loss, y_true: Any, y_pred: Any, sample_weight: Any) -> Any:
    """A loss on JAX values: its graph as a JAX function with its own VJP."""
    from kiln.layers.jax_bridge import bridged
    arrays = [y_true, y_pred] + ([] if sample_weight is None else [sample_weight])

    def build(phs: list) -> tuple:
        return [loss(*phs[:2], sample_weight=phs[2] if len(phs) > 2 else None)], [], None
    return bridged(loss, ("loss", loss._graph_key()), build, [], [], arrays)[0][0]


class LossFunctionWrapper(Loss):
    """Turns ``fn(y_true, y_pred, **kwargs)`` into a loss object."""

    def __init__(self, fn: Callable, reduction: Any = "sum_over_batch_size",
                 name: str | None = None, dtype: Any = None, **kwargs: Any):
        super().__init__(name=name or getattr(fn, "__name__", None), reduction=reduction,
                         dtype=dtype)
        self.fn = fn
        self._fn_kwargs = kwargs

    def call(self, y_true: Node, y_pred: Node) -> Node:
        return self.fn(y_true, y_pred, **self._fn_kwargs)

    def _graph_key(self) -> tuple:
        return super()._graph_key() + (self.fn,)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(self._fn_kwargs)
        if type(self) is LossFunctionWrapper:
            config["fn"] = getattr(self.fn, "__name__", repr(self.fn))
        return config

    @classmethod
    def from_config(cls, config: dict) -> Loss:
        config = dict(config)
        if cls is LossFunctionWrapper:
            from kiln.losses.lookup import get

            fn = config.pop("fn")
            return cls(get(fn) if isinstance(fn, str) else fn, **config)
        return cls(**config)


def _signature(order: tuple[str, ...], defaults: dict[str, Any]) -> inspect.Signature:
    """``(self, <order with defaults>)``: the signature a generated class shows."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature([inspect.Parameter("self", kind)] + [
        inspect.Parameter(n, kind, default=defaults[n]) for n in order])


def _bind(class_name: str, signature: inspect.Signature, defaults: dict[str, Any],
          args: tuple, kwargs: dict) -> dict[str, Any]:
    try:
        bound = signature.bind(None, *args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{class_name}: {e}") from None
    values = dict(defaults)
    values.update({k: v for k, v in bound.arguments.items() if k != "self"})
    return values


def wrapper_class(class_name: str, fn: Callable, default_name: str,
                  params: dict[str, Any], order: tuple[str, ...] | None = None
                  ) -> type[LossFunctionWrapper]:
    """Builds a Keras loss class (``MeanSquaredError`` ...) around a loss function.

    ``order`` is Keras' argument order (default: ``params``, then reduction, name, dtype)."""
    defaults = {**params, "reduction": "sum_over_batch_size", "name": default_name,
                "dtype": None}
    order = order or (*params, "reduction", "name", "dtype")
    signature = _signature(order, defaults)

    def __init__(self, *args: Any, **kwargs: Any):
        values = _bind(class_name, signature, defaults, args, kwargs)
        reduction, name, dtype = values.pop("reduction"), values.pop("name"), values.pop("dtype")
        LossFunctionWrapper.__init__(self, fn, reduction=reduction, name=name, dtype=dtype,
                                     **values)

    __init__.__signature__ = signature  # type: ignore[attr-defined]
    doc = (f"Loss object for :func:`{fn.__name__}` (arguments: "
           f"{', '.join(f'{k}={v!r}' for k, v in params.items()) or 'none'}; plus "
           "``reduction`` and ``name``).")
    return type(class_name, (LossFunctionWrapper,), {"__init__": __init__, "__doc__": doc,
                                                     "__module__": "kiln.losses"})
