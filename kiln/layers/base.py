"""The Layer base class, to Keras' contract: ``__init__`` stores config, ``build`` creates
weights with ``add_weight``, ``call`` is pure ``kiln.ops``, ``get_config`` returns the
constructor arguments.

Calling a layer on symbolic tensors builds it once and adds its nodes to the graph (and
records the call, so the functional API can find the layer graph). Calling it on NumPy arrays
runs it: the layer is traced once per input signature and compiled.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

import kiln.config
import kiln.ops as K
import kiln.tape
from kiln.core import (
    TENSOR_MASKS,
    Node,
    NodeAttrTable,
    Variable,
    WeakIdentityDict,
    discarding_symbolic_assigns,
    format_shape,
    placeholder,
)
from kiln.eager import by_run
from kiln.layers import channels_first
from kiln.layers.context import current, trace
from kiln.layers.host_tensor import has_host_tensor, refuse_host_input
from kiln.layers.naming import reset_names as reset_names  # re-exported (tests use it here)
from kiln.layers.naming import snake_case, unique_name
from kiln.layers.stateless import StatelessLayerMixin

# Symbolic tensor -> (layer, call index, output index): the functional API's layer graph. Kept
# on the tensor (a weak-key table could never free it: the layer holds its output tensors).
HISTORY: WeakIdentityDict = NodeAttrTable("_history")

# Symbolic tensor -> its Keras mask (a bool tensor, ``(batch, steps)`` for sequences): what
# Keras keeps in ``tensor._keras_mask``. Layers set it in ``__call__`` from ``compute_mask``
# and read it for the next layer's ``mask`` argument (docs/architecture.md, "Masking").
MASKS: WeakIdentityDict = TENSOR_MASKS  # Node._keras_mask reads it


def get_mask(t: Any) -> Node | None:
    """The Keras mask carried by tensor ``t`` (None when it carries none)."""
    return MASKS.get(t) if isinstance(t, Node) else None


def set_mask(t: Any, mask: Any) -> None:
    if isinstance(t, Node) and isinstance(mask, Node):
        MASKS[t] = mask


def flatten(x: Any) -> list:
    if isinstance(x, dict):
        return [v for k in x for v in flatten(x[k])]
    if isinstance(x, list | tuple):
        return [v for item in x for v in flatten(item)]
    return [x]


def map_structure(fn: Any, x: Any) -> Any:
    if isinstance(x, dict):
        return {k: map_structure(fn, v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return type(x)(map_structure(fn, v) for v in x)
    return fn(x)


def is_symbolic(x: Any) -> bool:
    return any(isinstance(v, Node) for v in flatten(x))


def shape_of(x: Any) -> Any:
    return map_structure(lambda t: tuple(t.shape), x)


class CallRecord:
    """One call of a layer on symbolic tensors (a Keras "node")."""

    __slots__ = ("inputs", "outputs", "kwargs", "args")

    def __init__(self, inputs: Any, outputs: Any, kwargs: dict, args: tuple = ()):
        self.inputs = inputs
        self.outputs = outputs
        self.kwargs = kwargs
        self.args = args


#: weight name -> the layer attribute holding its constraint, where Keras' argument name is not
#: ``<weight name>_constraint``
_CONSTRAINT_ATTRS = {"recurrent_kernel": "recurrent_constraint",
                     "depthwise_kernel": "depthwise_constraint",
                     "pointwise_kernel": "pointwise_constraint"}


class Layer(StatelessLayerMixin):
    """Base class of all layers.

    Args:
        name: unique name; generated from the class name when omitted (``dense``, ``dense_1``).
        trainable: whether the layer's weights are trained (takes effect at the next compile).
        dtype: the dtype of weights and computations (default ``kiln.config.floatx()``).
        input_shape: for a layer that starts a Sequential model, the shape of one sample.

    Example:
        >>> class Scale(kiln.layers.Layer):
        ...     def build(self, input_shape):
        ...         self.s = self.add_weight("s", (input_shape[-1],), initializer="ones")
        ...     def call(self, x):
        ...         return x * self.s
    """

    def __init__(self, *, activity_regularizer: Any = None, trainable: bool = True,
                 dtype: Any = None, autocast: bool = True, name: str | None = None,
                 input_shape: Any = None, input_dim: int | None = None, **kwargs: Any):
        batch_input_shape = kwargs.pop("batch_input_shape", None)
        if batch_input_shape is not None and input_shape is None:
            input_shape = tuple(batch_input_shape)[1:]
        # applied by __call__ (layers with their own argument, Dense ..., apply it in call)
        self._base_activity_regularizer = None
        if activity_regularizer is not None:
            from kiln import regularizers

            self._base_activity_regularizer = regularizers.get(activity_regularizer)
        if kwargs:
            raise TypeError(f"{type(self).__name__}: unexpected keyword argument(s) "
                            f"{sorted(kwargs)}")
        if isinstance(dtype, dict):  # Keras DTypePolicy config
            dtype = dtype.get("config", {}).get("name", None)
        elif isinstance(dtype, kiln.config.DTypePolicy):  # kiln.DTypePolicy("float64")
            dtype = dtype.name
        self.name = name or unique_name(snake_case(type(self).__name__))
        self._trainable = bool(trainable)
        self.dtype = dtype or kiln.config.floatx()
        if input_dim is not None and input_shape is None:
            input_shape = (input_dim,)
        self._input_shape_arg = tuple(input_shape) if input_shape is not None else None
        self.built = False
        self._weights: list[Variable] = []
        self._regularizers: list[tuple[Variable, Any]] = []
        self._inbound: list[CallRecord] = []
        self._eager_cache: dict = {}
        self.build_input_shape: Any = None

    # ---- weights -------------------------------------------------------------------------
    def add_weight(self, *args: Any, shape: Sequence[int] | None = None, initializer: Any = None,
                   dtype: Any = None, trainable: bool = True, autocast: bool = True,
                   regularizer: Any = None, constraint: Any = None, aggregation: Any = "none",
                   overwrite_with_gradient: bool = False, name: str | None = None) -> Variable:
        """Creates a weight Variable owned by this layer (Keras 3's arguments).

        Args:
            *args: Keras' positional ``(shape, initializer, dtype)``, or kiln's older form
                ``(name, shape, initializer, regularizer, trainable, dtype, constraint)``.
            shape: its shape (default ``()``).
            initializer: a name (``"glorot_uniform"``), an Initializer or a callable
                ``(shape, dtype) -> array``; default glorot_uniform for floats, else zeros.
            dtype: default the layer's dtype.
            trainable: whether optimizers update it. autocast: no effect (no mixed precision).
            regularizer: a name, Regularizer or callable ``w -> scalar tensor``; its penalty
                joins the loss inside the training graph.
            constraint: a name, Constraint or callable ``w -> w`` applied after each update
                (``Variable.constraint``); by default the layer's ``<name>_constraint``.
            aggregation: ``"none"``, ``"mean"``, ``"sum"`` or ``"only_first_replica"``
                (how replicas combine it), stored as ``Variable.aggregation``.
            overwrite_with_gradient: not supported (True raises).
            name: the weight's name (``kernel``, ``bias`` ...).

        Returns:
            The new :class:`kiln.Variable`.
        """
        from kiln.layers import weight_args

        a = weight_args.resolve(self.name, args, {
            "shape": shape, "initializer": initializer, "dtype": dtype, "trainable": trainable,
            "regularizer": regularizer, "constraint": constraint, "aggregation": aggregation,
            "overwrite_with_gradient": overwrite_with_gradient, "name": name})
        shape, initializer, dtype, name = a["shape"], a["initializer"], a["dtype"], a["name"]
        trainable, regularizer, constraint = a["trainable"], a["regularizer"], a["constraint"]
        if initializer is None:
            initializer = "glorot_uniform" if "float" in str(dtype or self.dtype) else "zeros"
        from kiln import constraints, initializers, regularizers

        shape = tuple(int(d) for d in shape)
        dtype = dtype or self.dtype
        init = initializers.get(initializer)
        # C order: a compiled CPU program reads a Variable through a flat view of its buffer,
        # and a Fortran-ordered value (the orthogonal initializer's, for a wide matrix) would
        # be read through a copy that neither set_weights nor the optimizer ever updates
        value = np.asarray(init(shape, dtype=dtype), dtype=dtype, order="C")
        if value.shape != shape:
            raise ValueError(f"{self.name}: initializer for {name!r} returned shape "
                             f"{value.shape}, expected {shape}")
        var = Variable(value, name=f"{self.name}/{name or 'weight'}", trainable=trainable,
                       dtype=dtype)
        var.short_name = name or "weight"
        var.aggregation = aggregation or "none"
        if constraint is None and name:
            constraint = getattr(self, _CONSTRAINT_ATTRS.get(name, f"{name}_constraint"), None)
        var.constraint = constraints.get(constraint)
        self._weights.append(var)
        if regularizer is not None:
            self._regularizers.append((var, regularizers.get(regularizer)))
        return var

    def _sublayers(self) -> list[Layer]:
        found: list[Layer] = []
        seen: set[int] = set()
        for key, value in vars(self).items():
            if key.startswith("_inbound") or key == "_eager_cache":
                continue
            for v in (value if isinstance(value, list | tuple) else
                      value.values() if isinstance(value, dict) else [value]):
                if isinstance(v, Layer) and v is not self and id(v) not in seen:
                    seen.add(id(v))
                    found.append(v)
        return found

    @property
    def trainable(self) -> bool:
        return self._trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        self._trainable = bool(value)
        for layer in self._sublayers():
            layer.trainable = value

    @property
    def input(self) -> Any:
        """The symbolic input of the layer's one call on symbolic tensors (Keras'
        ``layer.input``)."""
        return self._only_call("input").inputs

    @property
    def output(self) -> Any:
        """The symbolic output of the layer's one call on symbolic tensors (Keras'
        ``layer.output``; for a model built by the functional API, its outputs)."""
        value = self.__dict__.get("_output_value")
        if value is not None:
            return value
        return self._only_call("output").outputs

    @output.setter
    def output(self, value: Any) -> None:
        self.__dict__["_output_value"] = value

    def _only_call(self, what: str) -> CallRecord:
        calls = self.__dict__.get("_inbound") or []
        if not calls:
            raise AttributeError(f"Layer '{self.name}' has never been called on symbolic "
                                 f"tensors and thus has no defined {what}")
        if len(calls) > 1:
            raise AttributeError(f"Layer '{self.name}' has been called {len(calls)} times; "
                                 f"its {what} is ambiguous (Keras: use get_{what}_at(index))")
        return calls[0]

    @property
    def weights(self) -> list[Variable]:
        """All weights: this layer's own, then its sublayers' (trainable first per layer)."""
        return self.trainable_weights + self.non_trainable_weights

    def _all_weights(self) -> list[tuple[Variable, bool]]:
        out = [(w, self._trainable and w.trainable) for w in self._weights]
        for layer in self._sublayers():
            out += [(w, t and self._trainable) for w, t in layer._all_weights()]
        seen: set[int] = set()
        uniq = []
        for w, t in out:
            if id(w) not in seen:
                seen.add(id(w))
                uniq.append((w, t))
        return uniq

    @property
    def trainable_weights(self) -> list[Variable]:
        return [w for w, t in self._all_weights() if t]

    @property
    def non_trainable_weights(self) -> list[Variable]:
        return [w for w, t in self._all_weights() if not t]

    trainable_variables = trainable_weights
    non_trainable_variables = non_trainable_weights

    @property
    def variables(self) -> list[Variable]:
        return self.weights

    def get_weights(self) -> list[np.ndarray]:
        """Copies of the weights' values, in ``weights`` order."""
        return [w.numpy() for w in self.weights]

    def set_weights(self, weights: Sequence[Any]) -> None:
        """Sets all weights from a list of arrays (checked completely before any change)."""
        own = self.weights
        if len(weights) != len(own):
            raise ValueError(f"{self.name}: set_weights expected {len(own)} arrays, received "
                             f"{len(weights)}")
        arrays = [np.asarray(a) for a in weights]
        for w, a in zip(own, arrays):
            if a.shape != w.shape:
                raise ValueError(f"{self.name}: weight {w.name!r} has shape {w.shape}, "
                                 f"received {a.shape}")
        for w, a in zip(own, arrays):
            w.assign(a)

    def count_params(self) -> int:
        if not self.built:
            raise ValueError(f"{self.name}: count_params() needs a built layer; call it on "
                             "an input or build(input_shape) first")
        return int(sum(np.prod(w.shape, dtype=np.int64) for w in self.weights))

    def regularization_losses(self) -> list[Node]:
        """The penalty nodes of this layer's and its sublayers' weight regularizers."""
        out = []
        if self._trainable:
            out = [reg(w) for w, reg in self._regularizers]
        for layer in self._sublayers():
            out += layer.regularization_losses()
        return out

    @property
    def losses(self) -> list[Any]:
        """The weight regularization penalties (tensors) and the ``add_loss`` values of the
        last call on arrays (as in Keras), or in a trace (@kiln.function) of the traced call."""
        traced = self.__dict__.get("_traced_losses") or (False, ())  # (trace context, nodes)
        added = traced[1] if traced[0] is current() else self.__dict__.get("_eager_losses", ())
        return self.regularization_losses() + list(added)

    def add_loss(self, loss: Node) -> None:
        """Adds a loss term (a scalar tensor) computed inside ``call`` to the training loss."""
        ctx = current() or by_run()  # define-by-run (run_eagerly): the run collects them
        if ctx is not None:
            ctx.losses.append(loss)

    def add_metric(self, value: Any, name: str | None = None,
                   aggregation: str | None = None) -> None:
        """tf.keras 2.x's ``Layer.add_metric`` (Keras 3 dropped it): reports the mean of
        ``value`` over an epoch in ``fit``/``evaluate``'s logs under ``name``. Called with the
        result of a Metric object (``self.add_metric(self.acc(y, p))``, no ``name``), that
        metric, updated by the call, is reported under its own name.

        Args:
            value: a tensor computed in ``call`` (averaged over its elements and batches).
            name: the log's name; required unless ``value`` is a Metric's result.
            aggregation: None or ``"mean"`` (tf.keras' only values for a tensor).
        """
        if aggregation not in (None, "mean"):
            raise ValueError(f"Layer '{self.name}': add_metric aggregation must be None or "
                             f"'mean', received {aggregation!r}")
        ctx = current()
        if name is None:
            if isinstance(value, Node):
                raise ValueError(f"Layer '{self.name}': add_metric of a tensor needs a name, "
                                 "e.g. self.add_metric(ops.sum(inputs), name='activation_sum')")
            return  # a Metric's result: the Metric's own update is what gets reported
        from kiln.metrics import Mean

        added = self.__dict__.setdefault("_added_metrics", {})
        if name not in added:
            added[name] = Mean(name=name)
        if ctx is not None or isinstance(value, Node):
            added[name].update_state(value)

    def add_update(self, variable: Variable, value: Node) -> None:
        """Schedules ``variable <- value`` as part of the training step (e.g. moving means)."""
        ctx = current()
        if ctx is not None and ctx.training:
            ctx.updates.append((variable, value))

    # ---- build / call ----------------------------------------------------------------------
    def build(self, input_shape: Any) -> None:
        """Creates the weights for inputs of ``input_shape`` (batch dim None)."""
        self.built = True

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement call()")

    def _call_accepts(self, name: str) -> bool:
        try:
            params = inspect.signature(self.call).parameters
        except (TypeError, ValueError):
            return False
        return name in params or any(p.kind == p.VAR_KEYWORD for p in params.values())

    def _maybe_build(self, inputs: Any) -> None:
        if not self.built:
            shapes = shape_of(inputs)
            self.build_input_shape = shapes
            self.build(shapes)
            self.built = True

    def __call__(self, inputs: Any, *args: Any, training: bool | None = None,
                 **kwargs: Any) -> Any:
        if "mask" in kwargs and kwargs["mask"] is None and not self._call_accepts("mask"):
            # Keras passes ``mask=None`` to every layer (its functional configs record
            # ``"kwargs": {"mask": null}``); a call without a mask argument simply has none.
            del kwargs["mask"]
        if has_host_tensor(inputs, args, kwargs):  # strings: only host preprocessing layers
            raise refuse_host_input(self, inputs)
        if not is_symbolic(inputs) and not any(is_symbolic(a) for a in args):
            return self._call_eager(inputs, *args, training=training, **kwargs)
        inner = channels_first.to_last(self, inputs)  # the layout the kernels compute in
        self._check_inputs(inner)
        if getattr(self, "input_spec", None) is not None:  # Keras' InputSpec
            from kiln.layers.input_spec import assert_input_compatibility
            assert_input_compatibility(self.input_spec, inner, self.name)
        self._maybe_build(inner)
        recorded = dict(kwargs)  # what the functional API replays (not the implicit mask)
        if training is not None or self._call_accepts("training"):
            if self._call_accepts("training"):
                kwargs["training"] = training
        mask = kwargs.get("mask")
        if mask is None:
            found = map_structure(get_mask, inputs)
            mask = found if any(m is not None for m in flatten(found)) else None
            if mask is not None and self._call_accepts("mask") and \
                    "mask" in inspect.signature(self.call).parameters:
                kwargs["mask"] = mask
        if current() is None:  # functional construction: symbolic assigns are discarded
            with discarding_symbolic_assigns():
                result = self.call(inner, *args, **kwargs)
        else:
            result = self.call(inner, *args, **kwargs)
        outputs = channels_first.back(self, result, inputs, inner)
        if getattr(self, "_base_activity_regularizer", None) is not None and isinstance(
                outputs, Node):
            from kiln.layers._utils import add_activity_loss

            add_activity_loss(self, self._base_activity_regularizer, outputs)
        out_mask = self.compute_mask(inputs, mask)
        if current() is not None:
            # Inside a model trace (training step, eager call): nothing to record; recording
            # here would keep every traced graph alive in ``_inbound``.
            _attach_masks(outputs, out_mask)
            return outputs
        # Functional construction: give this call its own output tensors, even when the
        # layer returns its input or hash-consing finds an equal node elsewhere.
        outputs = map_structure(lambda t: K.identity(t) if isinstance(t, Node) else t, outputs)
        _attach_masks(outputs, out_mask)
        index = len(self._inbound)
        self._inbound.append(CallRecord(inputs, outputs, {k: v for k, v in recorded.items()
                                                          if k != "training"}, tuple(args)))
        for i, out in enumerate(flatten(outputs)):
            if isinstance(out, Node) and out not in HISTORY:
                HISTORY[out] = (self, index, i)
        return outputs

    def _check_inputs(self, inputs: Any) -> None:
        """Hook for input checks that name the layer and the shape received."""

    # ---- masking (Keras' contract) -------------------------------------------------------
    supports_masking = False

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        """The mask of this layer's output: the input's mask when the layer supports masking
        (it keeps the time axis, e.g. Dense or Dropout on sequences), else None."""
        if not self.supports_masking:
            return None
        return mask

    def _call_eager(self, inputs: Any, *args: Any, training: bool | None = None,
                    **kwargs: Any) -> Any:
        """Runs the layer on arrays through kiln's one eager path (:mod:`kiln.eager`): traced
        on placeholders and compiled once per input signature, training flag and extra
        arguments; the compiled functions live in this layer's own cache."""
        from kiln.layers.eager_call import call_eager

        return call_eager(self, inputs, *args, training=training, **kwargs)

    def compute_output_shape(self, input_shape: Any) -> Any:
        """The output shape for ``input_shape`` (found by tracing on placeholders)."""
        def to_ph(s: Any) -> Node:
            return placeholder(tuple(s), self.dtype)
        if isinstance(input_shape, list) and input_shape and isinstance(input_shape[0], list
                                                                        | tuple):
            phs: Any = [to_ph(s) for s in input_shape]
        else:
            phs = to_ph(input_shape)
        with trace():  # a shape query, not a functional call: leaves no call record
            out = self(phs)
        return map_structure(lambda t: tuple(t.shape), out)

    # ---- config -------------------------------------------------------------------------------
    def get_config(self) -> dict:
        """The constructor arguments (JSON-serializable) that recreate this layer."""
        config = {"name": self.name, "trainable": self.trainable, "dtype": self.dtype}
        if getattr(self, "_base_activity_regularizer", None) is not None:
            from kiln import regularizers

            config["activity_regularizer"] = regularizers.serialize(
                self._base_activity_regularizer)
        if self._input_shape_arg is not None:
            config["input_shape"] = self._input_shape_arg
        return config

    @classmethod
    def from_config(cls, config: dict) -> Layer:
        return cls(**config)

    def get_build_config(self) -> dict | None:
        if self.build_input_shape is None:
            return None
        return {"input_shape": self.build_input_shape}

    def build_from_config(self, config: dict | None) -> None:
        if config and config.get("input_shape") is not None and not self.built:
            shape = config["input_shape"]
            self.build(channels_first.build_shape(self, shape))
            self.build_input_shape = shape
            self.built = True

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r} built={self.built}>"


def _attach_masks(outputs: Any, masks: Any) -> None:
    if masks is None:
        return
    outs = flatten(outputs)
    ms = flatten(masks) if isinstance(masks, list | tuple) else [masks] * len(outs)
    for t, m in zip(outs, ms):
        set_mask(t, m)


def check_rank(layer: Layer, x: Node, rank: int | Sequence[int], what: str = "input") -> None:
    """Raises ValueError naming the layer when ``x`` has the wrong rank."""
    ranks = (rank,) if isinstance(rank, int) else tuple(rank)
    if x.ndim not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ValueError(f"Input 0 of layer '{layer.name}' is incompatible with the layer: "
                         f"expected ndim={want}, found ndim={x.ndim}. Full shape received: "
                         f"{format_shape(x.shape)}")


def check_last_dim(layer: Layer, x: Node, dim: int) -> None:
    """Raises ValueError naming the layer when the last axis of ``x`` is not ``dim``."""
    if x.shape[-1] is not None and x.shape[-1] != dim:
        raise ValueError(f"Input 0 of layer '{layer.name}' is incompatible with the layer: "
                         f"expected axis -1 of input shape to have value {dim}, but received "
                         f"input with shape {format_shape(x.shape)}")


def ops_sum_scalar(term: Any) -> Node:
    """A loss term (``add_loss``) as a scalar tensor (summed when it is not one)."""
    import kiln.ops as K

    node = K.convert_to_tensor(term)
    return K.sum(node) if node.ndim else node
