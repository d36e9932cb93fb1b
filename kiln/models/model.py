"""``Model``: a Layer that groups layers and knows how to train (see :mod:`.trainer`).

Three ways to make one, as in Keras:

* functional: ``Model(inputs, outputs)`` (returns a :class:`~kiln.models.functional.Functional`);
* subclassing: define ``__init__`` (layers as attributes) and ``call``;
* :class:`~kiln.models.sequential.Sequential`.

Class names in configs are resolved by kiln's one registry,
:func:`kiln.saving.registration.resolve_class`; ``Model`` (and ``Sequential``, ``Functional``
in their modules) register there as built-ins when imported.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import numpy as np

import kiln.tape
from kiln import distribution, export, saving
from kiln.core import Graph, placeholder
from kiln.eager import by_run
from kiln.layers import serialization as layer_serialization
from kiln.layers.base import Layer, flatten, map_structure
from kiln.layers.context import current as trace_context
from kiln.layers.context import trace
from kiln.layers.serialization import jsonable
from kiln.models import eager_loop, snapshot
from kiln.models.compat import ModelCompatMixin
from kiln.models.data import TensorSpec, pack, spec_from_shapes, structure_of
from kiln.models.stateless import StatelessModelMixin
from kiln.models.summary import print_summary
from kiln.models.trainer import Trainer
from kiln.saving.registration import register_builtin, resolve_class


def deserialize_layer(config: dict, custom_objects: dict[str, Any] | None = None) -> Layer:
    """Builds a layer (or model) from ``{"class_name", "config", ...}``."""
    if not isinstance(config, dict) or "class_name" not in config:
        raise TypeError(f"expected a layer config with 'class_name' and 'config', received "
                        f"{config!r}")
    cls = resolve_class(config.get("registered_name") or config["class_name"], custom_objects)
    inner = dict(config.get("config", {}))
    if isinstance(cls, type) and issubclass(cls, Model):
        layer = cls.from_config(inner, custom_objects=custom_objects)
    else:
        layer = cls.from_config(inner)
    build = config.get("build_config")
    if build and not layer.built and hasattr(layer, "build_from_config"):
        # Building here only saves work: a layer in a model builds at its first call anyway,
        # so a build_config it cannot apply (shapes written by another Keras) is not fatal.
        # Other errors (AttributeError, KeyError ...) are bugs and propagate.
        try:
            layer.build_from_config(build)
        except (ValueError, TypeError):
            pass
    return layer


def serialize_layer(layer: Layer) -> dict:
    """``{"module", "class_name", "config", "registered_name", "build_config"}``."""
    return layer_serialization.serialize(layer)


def _is_jsonable(x: Any) -> bool:
    if x is None or isinstance(x, bool | int | float | str):
        return True
    if isinstance(x, list | tuple):
        return all(_is_jsonable(v) for v in x)
    if isinstance(x, dict):
        return all(isinstance(k, str) and _is_jsonable(v) for k, v in x.items())
    return False


def is_input_layer(layer: Any) -> bool:
    return type(layer).__name__ == "InputLayer" and hasattr(layer, "output")


# ---- Model -------------------------------------------------------------------------------------
class Model(ModelCompatMixin, StatelessModelMixin, Trainer, Layer):
    """A group of layers with training and inference (``compile``/``fit``/``evaluate``/
    ``predict``).

    Functional: ``Model(inputs, outputs, name=None)``, with ``inputs``/``outputs`` a tensor,
    a list or a dict of tensors made from ``kiln.Input``. Subclassed: override ``__init__``
    (call ``super().__init__()``, assign layers as attributes) and ``call(inputs,
    training=None)``.

    Example:
        >>> x = kiln.Input((784,))
        >>> y = kiln.layers.Dense(10, activation="softmax")(kiln.layers.Dense(64, "relu")(x))
        >>> model = kiln.Model(x, y)
        >>> model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])

        >>> class MLP(kiln.Model):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.hidden = kiln.layers.Dense(64, activation="relu")
        ...         self.out = kiln.layers.Dense(10)
        ...     def call(self, x):
        ...         return self.out(self.hidden(x))
    """

    _is_graph_network = False
    _init_args: tuple = ((), {})

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is Model and (args or "inputs" in kwargs or "outputs" in kwargs):
            from kiln.models.functional import Functional

            return object.__new__(Functional)
        obj = object.__new__(cls)
        obj._init_args = (args, dict(kwargs))
        return obj

    def __init__(self, *args: Any, **kwargs: Any):
        if args or "inputs" in kwargs or "outputs" in kwargs:
            from kiln.models.functional import init_functional

            init_functional(self, *args, **kwargs)
            return
        self._init_model(**kwargs)

    def _init_model(self, name: str | None = None, trainable: bool = True, dtype: Any = None,
                    **kwargs: Any) -> None:
        Layer.__init__(self, name=name, trainable=trainable, dtype=dtype, **kwargs)
        self._init_trainer()

    def __getattr__(self, name: str) -> Any:
        # Only reached for missing attributes: explain the usual cause.
        if name in ("_weights", "_inbound", "_trainable", "_regularizers", "_eager_cache",
                    "built", "name", "dtype") and "_inbound" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}: it looks like you are subclassing "
                               "Model and forgot to call super().__init__() in __init__")
        if name in ("input", "output"):  # the property's own error, not a generic one
            return self._structure_of(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ---- structure ------------------------------------------------------------------------
    @property
    def layers(self) -> list[Layer]:
        """The model's layers (functional: in graph order, InputLayers first)."""
        return self._sublayers()

    def get_layer(self, name: str | None = None, index: int | None = None) -> Layer:
        """A layer by ``name`` or by ``index`` into :attr:`layers`.

        Raises:
            ValueError: when neither or both are given, or no such layer exists.
        """
        if name is not None and index is not None:
            raise ValueError("get_layer: provide only a layer name or a layer index, received "
                             f"name={name!r} and index={index!r}")
        layers = self.layers
        if index is not None:
            if not isinstance(index, int | np.integer):
                raise TypeError(f"get_layer: index must be an int, received {index!r}")
            if not -len(layers) <= index < len(layers):
                raise ValueError(f"Was asked to retrieve layer at index {index} but model "
                                 f"{self.name!r} only has {len(layers)} layers.")
            return layers[index]
        if name is not None:
            for layer in layers:
                if layer.name == name:
                    return layer
            raise ValueError(f"No such layer: {name}. Existing layers are: "
                             f"{[layer.name for layer in layers]}.")
        raise ValueError("get_layer: provide either a layer name or a layer index")

    def summary(self, line_length: int | None = None, positions: Any = None,
                print_fn: Callable | None = None, expand_nested: bool = False,
                show_trainable: bool = False, layer_range: Any = None) -> None:
        """Prints the layers, their output shapes and parameter counts, with Total /
        Trainable / Non-trainable params (like Keras).

        Args:
            line_length: total width of the table.
            positions: relative or absolute column boundaries.
            print_fn: called with each line (default ``print``).
            expand_nested: also list the layers of nested models.
            show_trainable: add a column telling whether each layer is trainable.
            layer_range: ``[first_name, last_name]`` to print a slice of the layers.
        """
        print_summary(self, line_length=line_length, positions=positions, print_fn=print_fn,
                      expand_nested=expand_nested, show_trainable=show_trainable,
                      layer_range=layer_range)

    # ---- building -------------------------------------------------------------------------
    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        was_built = self.built
        ctx = trace_context()
        if type(inputs) is np.ndarray and was_built and ctx is None and not args \
                and not kwargs:
            # ``model(x)`` on one array (serving): Layer.__call__'s path for it (an array is
            # neither symbolic nor a host tensor) to _call_eager's predict_on_batch, without
            # the checks of structures; the cached predict step straight away where
            # _call_eager would take predict_on_batch (inference, no tape, not eager)
            if not (self.run_eagerly or by_run() is not None or kiln.tape.recording()):
                outs = self._serve(inputs)
                if outs is not None:
                    return pack(outs, self._model_output_structure())
            return self._call_eager(inputs)
        first_loss = len(ctx.losses) if ctx is not None else 0
        try:
            out = Layer.__call__(self, inputs, *args, **kwargs)
        except BaseException:  # re-raised: a failed first call leaves the model unbuilt
            if not was_built:
                self.built = False
            raise
        if not was_built and self.built:
            self._after_build()
        if ctx is not None:  # traced (@kiln.function, a custom step): `model.losses` of it
            self.__dict__["_traced_losses"] = (ctx, list(ctx.losses[first_loss:]))
        return out

    def _call_eager(self, inputs: Any, *args: Any, training: bool | None = None,
                    **kwargs: Any) -> Any:
        # ``model(arrays)`` in inference: the cached predict function, with the same input
        # conversion (dtypes, dict keys) as predict().
        if self.run_eagerly or by_run() is not None:  # define-by-run (eager_loop.py)
            if eager_loop.can_call_directly(self):
                return eager_loop.call_direct(self, inputs, args, training, kwargs)
            return Layer._call_eager(self, inputs, *args, training=training, **kwargs)
        if not training and not args and not kwargs and not kiln.tape.recording():
            return self.predict_on_batch(inputs)  # builds an unbuilt model from the data
        return Layer._call_eager(self, inputs, *args, training=training, **kwargs)

    def _maybe_build(self, inputs: Any) -> None:
        # A model builds its sublayers by running call(); only record what it was built on.
        if not self.built:
            self.build_input_shape = map_structure(lambda t: tuple(t.shape), inputs)
            self._build_input_spec = map_structure(TensorSpec.of, inputs)
            self.built = True

    def build(self, input_shape: Any = None) -> None:
        """Builds the model's weights for inputs of ``input_shape`` (batch dim None) by
        tracing ``call`` on placeholders. A tuple for one input; a list or dict of tuples for
        several."""
        if self.built or self._is_graph_network:
            return
        if input_shape is None:
            raise ValueError(f"{self.name}: build() needs an input_shape (a tuple with the "
                             "batch dimension, e.g. (None, 784))")
        self._symbolic_build(spec_from_shapes(input_shape, self.dtype))

    def _symbolic_build(self, spec: Any) -> Any:
        """Calls the model on placeholders of ``spec`` (a structure of TensorSpec) outside
        any trace, so sublayers are built and their calls recorded (for ``summary``)."""
        phs = map_structure(lambda s: placeholder(s.shape, s.dtype or self.dtype), spec)
        out = self(phs)
        self._output_structure_cache = structure_of(out)
        return out

    def _after_build(self) -> None:
        """Hook run once the model is built (the trainer builds the optimizer here)."""
        self._build_optimizer_if_ready()

    def compute_output_shape(self, input_shape: Any) -> Any:
        phs = map_structure(lambda s: placeholder(s.shape, s.dtype or self.dtype),
                            spec_from_shapes(input_shape, self.dtype))
        with trace(training=False):
            out = self(phs)
        return map_structure(lambda t: tuple(t.shape), out)

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        if self._is_graph_network:  # a subclass that called Model.__init__(inputs, outputs)
            from kiln.models.functional import run_graph

            return run_graph(self, inputs, training)
        raise NotImplementedError(
            f"Model {type(self).__name__} has no call(): subclass Model and define "
            "call(inputs, training=None), or create a functional model with "
            "kiln.Model(inputs, outputs)")

    # ---- config ---------------------------------------------------------------------------
    def get_config(self) -> dict:
        """Subclassed models: ``name``, ``trainable`` and the ``__init__`` arguments that are
        JSON-serializable (override for the rest)."""
        config: dict[str, Any] = {"name": self.name, "trainable": self.trainable}
        args, kwargs = self._init_args
        try:
            bound = inspect.signature(type(self).__init__).bind_partial(None, *args, **kwargs)
            bound.apply_defaults()
        except TypeError:
            return config
        for key, value in list(bound.arguments.items())[1:]:
            param = inspect.signature(type(self).__init__).parameters[key]
            if param.kind == param.VAR_KEYWORD and isinstance(value, dict):
                for k, v in value.items():
                    if _is_jsonable(v):
                        config[k] = v
            elif param.kind != param.VAR_POSITIONAL and _is_jsonable(value):
                config[key] = value
        return config

    @classmethod
    def from_config(cls, config: dict, custom_objects: dict[str, Any] | None = None) -> Model:
        """Recreates a model from :meth:`get_config` (functional configs work on ``Model``)."""
        from kiln.models.functional import Functional, functional_from_config

        config = dict(config)
        if "layers" in config and "input_layers" in config and "output_layers" in config:
            target = cls if cls is not Model and issubclass(cls, Functional) else Functional
            return functional_from_config(target, config, custom_objects)
        try:
            params = inspect.signature(cls.__init__).parameters
        except (TypeError, ValueError):  # pragma: no cover
            params = {}
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            config = {k: v for k, v in config.items() if k in params}
        try:
            return cls(**config)
        except TypeError as exc:
            raise TypeError(f"Unable to revive model {cls.__name__} from config {config}: "
                            f"{exc}. Override get_config()/from_config() in {cls.__name__}"
                            ) from exc

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps({"class_name": type(self).__name__ if not self._is_graph_network
                           else "Functional", "config": jsonable(self.get_config())},
                          **kwargs)

    # ---- weights: one step's, never a mix (kiln/models/snapshot.py) ----------------------
    @snapshot.consistent
    def get_weights(self) -> list[np.ndarray]:
        """Copies of the weights' values, in ``weights`` order; during ``fit`` in another
        thread, all of them after the same step."""
        return super().get_weights()

    @snapshot.consistent
    def set_weights(self, weights: Any) -> None:
        """Sets all weights from a list of arrays (checked completely before any change);
        during ``fit`` in another thread, between two steps."""
        super().set_weights(weights)

    # ---- saving (implemented by kiln.saving) ----------------------------------------------
    @snapshot.consistent
    def save(self, filepath: Any, overwrite: bool = True, zipped: Any = None,
             **kwargs: Any) -> Any:
        """Saves the model (``.keras``, ``.h5``): see ``kiln.saving.save_model``. With several
        ranks (``kiln.distribution``) only rank 0 writes; call ``kiln.distribution.barrier()``
        before other ranks read the file."""
        if not distribution.is_chief():
            return None
        return saving.save_model(self, filepath, overwrite, zipped, **kwargs)

    @snapshot.consistent
    def save_weights(self, filepath: Any, overwrite: bool = True, max_shard_size: Any = None,
                     *, format: str | None = None) -> Any:  # noqa: A002
        """Saves the weights: Keras 3's layout for a ``.weights.h5`` path, kiln's for others
        unless ``format`` says (see ``kiln.saving.save_weights``).
        With several ranks only rank 0 writes (as :meth:`save`)."""
        if not distribution.is_chief():
            return None
        return saving.save_weights(self, filepath, overwrite, max_shard_size, format=format)

    def load_weights(self, filepath: Any, skip_mismatch: bool = False, **kwargs: Any) -> Any:
        """Loads weights saved by ``save_weights`` or Keras: see ``kiln.saving``."""
        return saving.load_weights(self, filepath, skip_mismatch, **kwargs)

    def export(self, filepath: Any, format: str = "tf_saved_model", verbose: Any = None,
               input_signature: Any = None, *, opset: int | None = None,
               dynamic_batch: bool = True, **kwargs: Any) -> Any:
        """Writes the inference graph as an ONNX model (``kiln.export.to_onnx``): inputs and
        outputs named like the model's, weights as initializers, a dynamic batch dimension.

        Args:
            filepath: the ``.onnx`` file (written atomically), or None to only return it.
            format: "onnx", the one format kiln exports. Keras' default, "tf_saved_model",
                is not available: with it, a path ending in ``.onnx`` (or None) exports
                ONNX and any other path raises ValueError.
            verbose: accepted for Keras (kiln prints nothing).
            input_signature: not supported (the model's own inputs are exported); a value
                raises ValueError.
            opset: the ONNX opset (default 17).
            dynamic_batch: a symbolic batch dimension (False fixes it to 1).
            **kwargs: more options of ``kiln.export.to_onnx`` (``unroll``).

        Returns:
            The ``onnx.ModelProto`` (needs ``pip install "kiln-nn[onnx]"``).

        Example:
            >>> model.export("model.onnx")
        """
        onnx_path = filepath is None or str(filepath).endswith(".onnx")
        if format != "onnx" and not (format == "tf_saved_model" and onnx_path):
            raise ValueError(f"{self.name}: export supports format='onnx' only, received "
                             f"{format!r} for the path {str(filepath)!r} (pass "
                             "format='onnx' or a path ending in .onnx)")
        if input_signature is not None:
            raise ValueError(f"{self.name}: export(input_signature=...) is not supported by "
                             "kiln: the model's own inputs are exported")
        specs = self._model_input_specs()
        if specs is None:
            raise ValueError(f"{self.name}: build the model before exporting it (call it on "
                             "data, build(input_shape) or fit())")
        inputs = [placeholder(s.shape, s.dtype, name=s.name) for s in specs]
        with export.record_layers(self) as origin, trace(training=False):
            outputs = self(self._pack_inputs(inputs), training=False)
        # with several ranks (kiln.distribution) only rank 0 writes the file
        path = filepath if distribution.is_chief() else None
        return export.to_onnx(Graph(inputs, list(flatten(outputs))), path, opset=opset,
                              dynamic_batch=dynamic_batch, output_names=self.output_names,
                              name=self.name, origin=origin, **kwargs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r} built={self.built}>"


register_builtin("Model", Model)

__all__ = ["Model", "deserialize_layer", "serialize_layer"]
