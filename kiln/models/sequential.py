"""``Sequential``: a plain stack of layers, each feeding the next."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.tape
from kiln.core import Node, format_shape
from kiln.layers.base import HISTORY, Layer
from kiln.layers.host_tensor import HostTensor, is_string_dtype
from kiln.layers.input_layer import InputLayer
from kiln.layers.preprocessing.tf_data import is_tf_tensor, tf_entry
from kiln.models.data import TensorSpec, to_numpy
from kiln.models.functional import adjust_input_rank
from kiln.models.host_prefix import conform_host_input
from kiln.models.model import Model, deserialize_layer, is_input_layer, serialize_layer
from kiln.saving.registration import register_builtin


class Sequential(Model):
    """A linear stack of layers.

    The input shape comes from an ``kiln.Input`` added first, from ``input_shape=`` on the
    first layer, from :meth:`build`, or (deferred) from the data at the first ``fit``/
    ``predict``/call.

    Args:
        layers: optional list of layers to add.
        name: the model's name.
        trainable: whether its weights are trained.

    Example:
        >>> model = kiln.Sequential([
        ...     kiln.Input((784,)),
        ...     kiln.layers.Dense(512, activation="relu"),
        ...     kiln.layers.Dense(10, activation="softmax"),
        ... ])
    """

    @tf_entry
    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if is_tf_tensor(inputs):  # inside tf.data: each (preprocessing) layer with TF ops
            for layer in self.layers:
                inputs = layer(inputs, *args, **kwargs)
            return inputs
        return super().__call__(inputs, *args, **kwargs)

    def __init__(self, layers: Any = None, trainable: bool = True, name: str | None = None,
                 **kwargs: Any):
        self._init_model(name=name, trainable=trainable, **kwargs)
        self._layers: list[Layer] = []
        self._chain: list[Node] | None = None
        if layers is not None:
            if not isinstance(layers, list | tuple):
                raise TypeError(f"Sequential: layers must be a list of layers, received "
                                f"{type(layers).__name__}")
            for layer in layers:
                self.add(layer, rebuild=False)
            self._rebuild()

    # ---- structure ------------------------------------------------------------------------
    @property
    def layers(self) -> list[Layer]:
        """The layers, without the InputLayer."""
        return [layer for layer in self._layers if not is_input_layer(layer)]

    def _sublayers(self) -> list[Layer]:
        return list(self._layers)

    def add(self, layer: Any, rebuild: bool = True) -> None:
        """Appends a layer (or a ``kiln.Input`` tensor as the first element).

        Raises:
            TypeError: for something that is not a Layer.
            ValueError: for a duplicate layer name, a second input, or a layer that does not
                accept the current output shape.
        """
        if isinstance(layer, HostTensor):  # kiln.Input(shape, dtype="string")
            h = HISTORY.get(layer)
            if h is None or not is_input_layer(h[0]):
                raise TypeError(f"Sequential.add: the only tensors that can be added are "
                                f"kiln.Input tensors; received {layer!r}")
            layer = h[0]
        if isinstance(layer, Node):
            h = HISTORY.get(layer)
            if h is None or not is_input_layer(h[0]):
                raise TypeError(f"Sequential.add: the only tensors that can be added are "
                                f"kiln.Input tensors; received {layer!r}")
            layer = h[0]
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential.add: expected a Layer instance, received "
                            f"{type(layer).__name__} {layer!r}")
        added = []
        if is_input_layer(layer):
            if self._layers and is_input_layer(self._layers[0]):
                raise ValueError(f"Sequential model '{self.name}' has already been configured "
                                 f"to use input shape {format_shape(self._layers[0].batch_shape)}. "
                                 "You cannot add a different Input layer to it.")
            if self._layers:
                raise ValueError(f"Sequential model '{self.name}': an Input can only be the "
                                 "first element")
        elif not self._layers and getattr(layer, "_input_shape_arg", None) is not None:
            inp = InputLayer(shape=layer._input_shape_arg, dtype=layer.dtype
                                     if layer.dtype in ("float32", "float64") else None)
            self._layers.append(inp)
            added.append(inp)
        if any(existing.name == layer.name for existing in self._layers):
            for a in added:
                self._layers.remove(a)
            raise ValueError(f"All layers added to a Sequential model should have unique "
                             f"names. Name {layer.name!r} is already the name of a layer in "
                             f"model '{self.name}'. Pass a unique `name` to the layer.")
        self._layers.append(layer)
        added.append(layer)
        if rebuild:
            try:
                self._rebuild(incremental=True)
            except Exception:  # re-raised, after undoing the add: the model stays as it was
                for a in added:
                    self._layers.remove(a)
                self._rebuild()
                raise

    def pop(self, rebuild: bool = True) -> Layer:
        """Removes and returns the last layer."""
        if not self.layers:
            raise TypeError(f"Sequential model '{self.name}': there are no layers to pop")
        layer = self._layers.pop()
        self._chain = None
        if rebuild:
            self._rebuild()
        return layer

    def _rebuild(self, incremental: bool = False) -> None:
        """Calls the layers on the InputLayer's tensor (when there is one) to build them and
        record the output shapes."""
        self._output_specs_cache = None
        if not self._layers or not is_input_layer(self._layers[0]) or len(self._layers) < 2:
            was = self.built
            self._chain = None
            self.built = False
            if was:
                self._drop_steps()
            return
        chain = self._chain
        if incremental and chain is not None and len(chain) == len(self._layers) - 1:
            chain = chain + [self._layers[-1](chain[-1])]
        else:
            chain = [self._layers[0].output]
            for layer in self._layers[1:]:
                chain.append(layer(chain[-1]))
        if isinstance(chain[-1], HostTensor):
            raise ValueError(f"Sequential model '{self.name}': its output (from layer "
                             f"'{self._layers[-1].name}') is a string tensor; a kiln model's "
                             "outputs are numeric (strings never enter its graph)")
        was_built = self.built
        self._chain = chain
        self.inputs = [chain[0]]
        self.outputs = [chain[-1]]
        self._build_input_spec = TensorSpec(chain[0].shape, chain[0].dtype,
                                            self._layers[0].name)
        self.build_input_shape = tuple(chain[0].shape)
        self.built = True
        self._drop_steps()
        if not was_built:
            self._after_build()

    def _drop_steps(self) -> None:
        self._train_fns, self._test_fns, self._predict_fns = {}, {}, {}
        self._batch_cache = {}
        self.train_function = self.test_function = self.predict_function = None
        self._outputs = None

    def build(self, input_shape: Any = None) -> None:
        """Builds the model for inputs of ``input_shape`` (with the batch dimension)."""
        if input_shape is None:
            if self.built:
                return
            raise ValueError(f"Sequential model '{self.name}': build() needs an input_shape, "
                             "e.g. (None, 784)")
        if isinstance(input_shape, TensorSpec):
            self._build_from_spec(input_shape.shape, input_shape.dtype)
        else:
            self._build_from_spec(tuple(input_shape), None)

    def _build_from_spec(self, shape: tuple, dtype: str | None) -> None:
        shape = tuple(None if d is None else int(d) for d in shape)
        if self._layers and is_input_layer(self._layers[0]):
            have = tuple(self._layers[0].batch_shape)
            if len(have) != len(shape) or any(a is not None and b is not None and a != b
                                              for a, b in zip(have[1:], shape[1:])):
                raise ValueError(f"Sequential model '{self.name}' has already been "
                                 f"configured to use input shape {format_shape(have)}. You cannot "
                                 f"build it with input_shape {format_shape(shape)}")
            return
        if not self._layers:
            raise ValueError(f"Sequential model '{self.name}' has no layers; add layers before "
                             "building it")
        # Like Keras: the input takes the first layer's (float) dtype, whatever the data's;
        # layers that need integers (Embedding) cast.
        first = self._layers[0].dtype
        dtype = "string" if dtype is not None and is_string_dtype(dtype) else (
            first if first in ("float32", "float64") else None)
        self._layers.insert(0, InputLayer(batch_shape=shape, dtype=dtype))
        try:
            self._rebuild()
        except Exception:  # re-raised, after undoing the build: the model stays unbuilt
            self._layers.pop(0)
            self._chain = None
            self.built = False
            raise

    def _symbolic_build(self, spec: Any) -> Any:
        if not isinstance(spec, TensorSpec):
            raise ValueError(f"Sequential model '{self.name}' takes a single input array, "
                             f"received a {type(spec).__name__} of inputs")
        self._build_from_spec(spec.shape, spec.dtype)
        return self.outputs[0]

    def _maybe_build(self, inputs: Any) -> None:
        if not self.built:
            if not isinstance(inputs, Node):
                raise ValueError(f"Sequential model '{self.name}' takes a single input "
                                 f"tensor, received {type(inputs).__name__}")
            self._build_from_spec(tuple(inputs.shape), inputs.dtype)

    def call(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Any:
        x = inputs
        layers = self.layers
        n_host = self._host_count()
        if n_host and isinstance(x, Node):  # the compiled part, on the host prefix's output
            layers = layers[n_host:]
        if isinstance(x, Node) and self._chain is not None:  # Keras' _adjust_input_rank
            x = adjust_input_rank(x, self._chain[n_host])
        for layer in layers:
            x = layer(x) if training is None else layer(x, training=training)
        return x

    # ---- trainer hooks ----------------------------------------------------------------------
    def _model_input_specs(self) -> list[TensorSpec] | None:
        if self._chain is None:
            return None
        n_host = self._host_count()
        if n_host:  # the compiled graph's input: the host prefix's numeric output
            first = self._chain[n_host]
            return [TensorSpec(first.shape, first.dtype, self._layers[n_host].name)]
        return [TensorSpec(self._chain[0].shape, self._chain[0].dtype, self._layers[0].name)]

    # ---- string inputs: the host prefix (kiln/models/host_prefix.py) ---------------------------
    def _host_count(self) -> int:
        """How many leading layers run on the host, before the compiled graph: those fed the
        string input (TextVectorization, StringLookup, Hashing ...) up to the first numeric
        output; 0 for a numeric input."""
        chain = self._chain
        if chain is None or not isinstance(chain[0], HostTensor):
            return 0
        n = 1
        while isinstance(chain[n], HostTensor):  # a string -> string host layer
            n += 1  # the model's last output is numeric: _rebuild checked it
        return n

    def _run_host(self, x: Any) -> np.ndarray:
        """The compiled graph's input array: the host layers run eagerly on the raw strings."""
        assert self._chain is not None
        a = to_numpy(x)
        a = np.asarray(a, dtype=object) if isinstance(a, list | tuple) else np.asarray(a)
        spec = TensorSpec(self._chain[0].shape, "string", self._layers[0].name)
        a = conform_host_input(a, spec, self.name)
        for layer in self.layers[:self._host_count()]:
            a = np.asarray(layer(a))
        return a

    def _standardize_x(self, x: Any) -> list:
        if self._chain is None and self._layers and _is_string_data(x):
            a = np.asarray(to_numpy(x), dtype=object) if isinstance(x, list | tuple) \
                else np.asarray(to_numpy(x))
            self._build_from_spec((None,) + a.shape[1:], "string")  # strings: host layers
        if self._host_count():
            x = self._run_host(x)
        return super()._standardize_x(x)

    def _call_eager(self, inputs: Any, *args: Any, training: bool | None = None,
                    **kwargs: Any) -> Any:
        if not self._host_count() or (not training and not args and not kwargs
                                      and not kiln.tape.recording()):
            return super()._call_eager(inputs, *args, training=training, **kwargs)
        return Layer._call_eager(self, self._run_host(inputs), *args, training=training,
                                 **kwargs)

    def _model_input_structure(self) -> tuple | None:
        return None if self._chain is None else ("single",)

    def _model_output_specs(self) -> list[TensorSpec]:
        if self._chain is None:
            raise ValueError(f"Sequential model '{self.name}' is not built yet; give it an "
                             "Input, call build(input_shape), or fit/predict on data first")
        return [TensorSpec.of(self._chain[-1])]

    def _model_output_structure(self) -> tuple:
        return ("single",)

    @property
    def output_names(self) -> list[str]:
        layers = self.layers
        return [layers[-1].name] if layers else ["output"]

    @property
    def input_shape(self) -> tuple:
        if self._chain is None:
            raise AttributeError(f"Sequential model '{self.name}' is not built yet")
        return tuple(self._chain[0].shape)

    @property
    def output_shape(self) -> tuple:
        if self._chain is None:
            raise AttributeError(f"Sequential model '{self.name}' is not built yet")
        return tuple(self._chain[-1].shape)

    # ---- config -------------------------------------------------------------------------------
    def get_config(self) -> dict:
        """``{"name", "trainable", "layers": [{"class_name", "config", ...}],
        "build_input_shape"}`` (Keras 3's layout; the InputLayer, when present, first)."""
        config: dict[str, Any] = {"name": self.name, "trainable": self.trainable,
                                  "layers": [serialize_layer(layer) for layer in self._layers]}
        if self._chain is not None:
            config["build_input_shape"] = list(self._chain[0].shape)
        return config

    @classmethod
    def from_config(cls, config: Any, custom_objects: dict[str, Any] | None = None
                    ) -> Sequential:
        if isinstance(config, list):  # very old Keras: just the list of layers
            name, layer_configs, build_shape, trainable = None, config, None, True
        else:
            name = config.get("name")
            layer_configs = config["layers"]
            build_shape = config.get("build_input_shape")
            trainable = config.get("trainable", True)
        model = cls(name=name)
        for layer_config in layer_configs:
            model.add(deserialize_layer(layer_config, custom_objects), rebuild=False)
        model._rebuild()
        if not model.built and build_shape:
            model.build(tuple(build_shape))
        if trainable is False:
            model.trainable = False
        return model


def _is_string_data(x: Any) -> bool:
    """Whether ``x`` is an array (or a list) of strings."""
    if isinstance(x, list | tuple):
        return bool(x) and all(isinstance(v, str | bytes) for v in x)
    a = to_numpy(x)
    return isinstance(a, np.ndarray) and (a.dtype.kind in "US" or (
        a.dtype.kind == "O" and a.size > 0 and isinstance(a.flat[0], str | bytes)))


register_builtin("Sequential", Sequential)

__all__ = ["Sequential"]
