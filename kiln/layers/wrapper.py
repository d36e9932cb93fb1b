"""Keras' ``Wrapper`` base class, the ``Pipeline`` of preprocessing layers, and the layers
that host another framework's code (``JaxLayer``, ``FlaxLayer``, ``TorchModuleWrapper``,
``TFSMLayer``), which kiln cannot run: constructing one raises an error that says so."""

from __future__ import annotations

from typing import Any

from kiln.core import Node
from kiln.layers._utils import deserialize_layer, serialize_layer
from kiln.layers.base import Layer


class Wrapper(Layer):
    """Base class of the layers that wrap another layer (Keras' ``Wrapper``): stores
    ``layer``, builds it with the wrapper, and serializes it in the config. Subclass it and
    write ``call``; as a layer of its own it calls the wrapped layer unchanged.

    Args:
        layer: the layer to wrap.

    Example:
        >>> class Doubled(kiln.layers.Wrapper):
        ...     def call(self, x):
        ...         return 2.0 * self.layer(x)
    """

    def __init__(self, layer: Layer, **kwargs: Any):
        if not isinstance(layer, Layer):
            raise ValueError(f"Layer {layer!r} supplied to Wrapper isn't a supported layer "
                             "type. Please ensure wrapped layer is a valid Keras layer.")
        super().__init__(**kwargs)
        self.layer = layer

    def build(self, input_shape: Any = None) -> None:
        if not self.layer.built:
            self.layer.build(input_shape)
            self.layer.build_input_shape = input_shape
            self.layer.built = True
        self.built = True

    def call(self, inputs: Node, training: Any = None) -> Any:
        kwargs = {"training": training} if self.layer._call_accepts("training") else {}
        return self.layer.call(inputs, **kwargs)

    def get_config(self) -> dict:
        config = super().get_config()
        config["layer"] = serialize_layer(self.layer)
        return config

    @classmethod
    def from_config(cls, config: dict, custom_objects: Any = None) -> Layer:
        config = dict(config)
        layer = deserialize_layer(config.pop("layer"), custom_objects)
        return cls(layer, **config)


class Pipeline(Layer):
    """Applies a list of layers in order, like a small Sequential for preprocessing (Keras'
    ``Pipeline``); its ``training`` defaults to True, as Keras', so random augmentation layers
    in it are active when it is called on data.

    Args:
        layers: the layers, applied first to last.
        name: optional name.

    Example:
        >>> augment = kiln.layers.Pipeline([kiln.layers.RandomFlip(),
        ...                                 kiln.layers.RandomRotation(0.1)])
    """

    def __init__(self, layers: list, name: str | None = None, **kwargs: Any):
        super().__init__(name=name, **kwargs)
        layers = list(layers)
        for la in layers:
            if not isinstance(la, Layer):
                raise ValueError(f"Pipeline: every entry of `layers` must be a Layer, "
                                 f"received {la!r}")
        self._pipeline_layers = layers

    @property
    def layers(self) -> list:
        return list(self._pipeline_layers)

    def call(self, inputs: Any, training: bool | None = True, mask: Any = None) -> Any:
        for layer in self._pipeline_layers:
            kwargs = {"training": training} if training is not None and layer._call_accepts(
                "training") else {}
            inputs = layer(inputs, **kwargs)
        return inputs

    def get_config(self) -> dict:
        return {"layers": [serialize_layer(la) for la in self._pipeline_layers],
                "name": self.name}

    @classmethod
    def from_config(cls, config: dict, custom_objects: Any = None) -> Layer:
        layers = config.get("layers")
        if not isinstance(layers, list | tuple):
            raise ValueError("`Pipeline` config must contain a `layers` key mapping to a list "
                             f"of serialized layers. Received config with layers={layers}.")
        config = dict(config)
        config["layers"] = [deserialize_layer(la, custom_objects) for la in layers]
        return cls(**config)


class _Foreign(Layer):
    """A Keras layer that runs another framework's code: kiln compiles its own graph and
    cannot call into it. Each subclass takes Keras' arguments, so a call written for Keras
    reaches the explanation rather than a TypeError about the arguments."""

    framework = ""
    advice = ""

    @classmethod
    def _refuse(cls) -> NotImplementedError:
        return NotImplementedError(
            f"{cls.__name__}: kiln cannot host {cls.framework} code; kiln compiles "
            f"its own static graph from kiln.ops and has no {cls.framework} runtime inside "
            f"it. {cls.advice}")

    @classmethod
    def from_config(cls, config: dict) -> Layer:
        raise cls._refuse()


class JaxLayer(_Foreign):
    """Keras' wrapper of a JAX function; kiln cannot host it (constructing one raises
    NotImplementedError, docs/layers.md "Layers kiln cannot host")."""

    framework = "JAX"
    advice = ("Rewrite the function with kiln.ops (the same names as keras.ops) in a "
              "kiln.layers.Layer subclass, or run it with Keras itself.")

    def __init__(self, call_fn: Any, init_fn: Any = None, params: Any = None,
                 state: Any = None, seed: Any = None,
                 native_serialization_platforms: Any = None, **kwargs: Any):
        raise self._refuse()


class FlaxLayer(JaxLayer):
    """Keras' wrapper of a Flax module; kiln cannot host it (see JaxLayer)."""

    framework = "Flax"

    def __init__(self, module: Any, method: Any = None, variables: Any = None,
                 **kwargs: Any):
        raise self._refuse()


class TorchModuleWrapper(_Foreign):
    """Keras' wrapper of a ``torch.nn.Module``; kiln cannot host it (constructing one raises
    NotImplementedError)."""

    framework = "PyTorch"
    advice = ("Rebuild the module from kiln layers and copy its weights over (kiln's "
              "kernel layouts are Keras'), or run it with Keras' torch backend.")

    def __init__(self, module: Any, name: str | None = None, output_shape: Any = None,
                 **kwargs: Any):
        raise self._refuse()


class TFSMLayer(_Foreign):
    """Keras' layer that loads a TensorFlow SavedModel; kiln cannot host it (constructing one
    raises NotImplementedError)."""

    framework = "TensorFlow SavedModel"
    advice = ("Export the model to a .keras file (or its weights to .weights.h5) and load "
              "that with kiln.saving.load_model / load_weights.")

    def __init__(self, filepath: Any, call_endpoint: str = "serve",
                 call_training_endpoint: str | None = None, trainable: bool = True,
                 name: str | None = None, dtype: Any = None):
        raise self._refuse()
