"""Core layers: Dense, Activation, Dropout, Embedding, Lambda."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln import activations, initializers, regularizers
from kiln.core import Node, format_shape
from kiln.layers._utils import (
    add_activity_loss,
    check_min_rank,
    constraint_config,
    drop_keras_extras,
    positive_int,
    random_stream,
    set_constraints,
)
from kiln.layers.base import Layer, check_last_dim
from kiln.layers.context import current, in_training


class Dense(Layer):
    """A densely connected layer: ``activation(inputs @ kernel + bias)``.

    Works on inputs of rank >= 2: the product is over the last axis, so ``(batch, d0, ...,
    in)`` becomes ``(batch, d0, ..., units)``.

    Args:
        units: output dimension.
        activation: activation name or function (default: none, i.e. linear).
        use_bias: whether to add a bias vector.
        kernel_initializer: initializer of the ``(in, units)`` kernel (default
            ``"glorot_uniform"``).
        bias_initializer: initializer of the bias (default ``"zeros"``).
        kernel_regularizer, bias_regularizer: optional weight penalties.
        activity_regularizer: optional penalty on the output (divided by the batch size).
        kernel_constraint, bias_constraint: optional constraints (``kiln.constraints``).

    Example:
        >>> layer = kiln.layers.Dense(512, activation="relu")
        >>> y = layer(kiln.Input((784,)))      # 784 * 512 + 512 = 401,920 parameters
    """

    supports_masking = True  # keeps the time axis: the mask passes through

    def __init__(self, units: int, activation: Any = None, use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, lora_rank: int | None = None,
                 lora_alpha: float | None = None, quantization_config: Any = None,
                 **kwargs: Any):
        drop_keras_extras("Dense", {"lora_rank": lora_rank, "lora_alpha": lora_alpha,
                                    "quantization_config": quantization_config})
        super().__init__(**kwargs)
        units = positive_int("Dense", "units", units)
        set_constraints(self, kernel_constraint=kernel_constraint,
                        bias_constraint=bias_constraint)
        self.units = int(units)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.activity_regularizer = regularizers.get(activity_regularizer)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_min_rank(self, inputs, 2)
            if self.built:
                check_last_dim(self, inputs, self.kernel.shape[0])

    def build(self, input_shape: Any) -> None:
        in_dim = input_shape[-1]
        if in_dim is None:
            raise ValueError(f"Layer '{self.name}' (Dense) needs a known last dimension, "
                             f"received input shape {format_shape(input_shape)}")
        self.kernel = self.add_weight("kernel", (in_dim, self.units), self.kernel_initializer,
                                      self.kernel_regularizer)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.units,), self.bias_initializer,
                                        self.bias_regularizer)
        self.built = True

    def call(self, inputs: Node) -> Node:
        out = K.matmul(inputs, self.kernel)
        if self.bias is not None:
            out = out + self.bias
        out = self.activation(out)
        add_activity_loss(self, self.activity_regularizer, out)
        return out

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "units": self.units,
            "activation": activations.serialize(self.activation),
            "use_bias": self.use_bias,
            "kernel_initializer": initializers.serialize(self.kernel_initializer),
            "bias_initializer": initializers.serialize(self.bias_initializer),
            "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": regularizers.serialize(self.bias_regularizer),
            **constraint_config(self, "kernel_constraint", "bias_constraint"),
            "quantization_config": None,
        })
        if self.activity_regularizer is not None:
            config["activity_regularizer"] = regularizers.serialize(self.activity_regularizer)
        return config


class Activation(Layer):
    """Applies an activation function.

    Args:
        activation: a name (``"relu"``) or a function.

    Example:
        >>> y = kiln.layers.Activation("softmax")(x)
    """

    supports_masking = True  # keeps the time axis: the mask passes through

    def __init__(self, activation: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self.activation = activations.get(activation)

    def call(self, inputs: Node) -> Node:
        return self.activation(inputs)

    def get_config(self) -> dict:
        config = super().get_config()
        config["activation"] = activations.serialize(self.activation)
        return config


class Dropout(Layer):
    """Randomly zeroes a fraction ``rate`` of the inputs during training (scaling the rest by
    ``1 / (1 - rate)``); the identity in inference.

    Dropout is active in training: inside a training trace that carries a random key (a
    model's training step: ``kiln.layers.context.trace(training=True, rng_key=key)``), and in
    an eager call on arrays with ``training=True`` (of the layer or of a model holding it).
    An eager call draws a fresh key ``[seed, 0]`` from kiln's global generator
    (``kiln.random_state.next_seed``) every time,
    so two calls drop different units and ``kiln.utils.set_random_seed`` makes the sequence
    of masks reproducible. Without ``training=True`` (or with ``rate=0``) an eager call is the
    identity, and so is a symbolic call in a trace without a key.

    Args:
        rate: fraction of the inputs to drop, in ``[0, 1)``.
        noise_shape: optional shape of the keep/drop mask, broadcast against the input
            (``None`` entries take the input's size), e.g. ``(None, 1, features)`` to drop the
            same features at every time step.
        seed: optional int; it selects this layer's random stream (default: a stream drawn
            from kiln's seeded generator when the layer is built, so two models built alike
            after the same ``kiln.utils.set_random_seed`` drop the same units; the config
            stores it as ``seed``, so a saved and loaded model keeps it).

    Example:
        >>> y = kiln.layers.Dropout(0.5)(x)
    """

    supports_masking = True  # keeps the time axis: the mask passes through

    def __init__(self, rate: float, noise_shape: Any = None, seed: int | None = None,
                 **kwargs: Any):
        super().__init__(**kwargs)
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate < 1:
            raise ValueError(f"Dropout: rate must be a float in [0, 1), received rate={rate!r}")
        self.rate = float(rate)
        self.noise_shape = None if noise_shape is None else tuple(
            None if d is None else int(d) for d in noise_shape)
        self.seed = None if seed is None else int(seed)
        self._stream = random_stream(self.seed, self.rate > 0)

    @property
    def salt(self) -> int:
        """The random stream of this layer: the seed (mod 2^32), or the one drawn when it
        was constructed (see ``seed``)."""
        return 0 if self._stream is None else self._stream

    def _check_inputs(self, inputs: Any) -> None:
        if self.noise_shape is not None and isinstance(inputs, Node):
            ok = len(self.noise_shape) == inputs.ndim and all(
                n is None or n == 1 or d is None or n == d
                for n, d in zip(self.noise_shape, inputs.shape))
            if not ok:
                raise ValueError(f"Layer '{self.name}' (Dropout): noise_shape "
                                 f"{self.noise_shape} does not broadcast to the input shape "
                                 f"{format_shape(inputs.shape)}")

    def call(self, inputs: Node, training: bool | None = None) -> Node:
        ctx = current()
        if not in_training(training) or self.rate == 0.0 or ctx is None or ctx.rng_key is None:
            return inputs
        if self.noise_shape is None:
            return K.dropout(inputs, self.rate, ctx.rng_key, self.salt)
        # A mask of noise_shape: slice the input down to size 1 on the broadcast axes.
        spec = [(0, 1, 1) if n == 1 and d != 1 else (None, None, 1)
                for n, d in zip(self.noise_shape, inputs.shape)]
        like = K.slice(inputs, spec, None)
        keep = K.greater_equal(K.random_uniform(ctx.rng_key, like, self.salt),
                               K.constant(self.rate, inputs.dtype))
        scaled = inputs * K.constant(1.0 / (1.0 - self.rate), inputs.dtype)
        return K.where(keep, scaled, K.constant(0.0, inputs.dtype))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"rate": self.rate,
                       "seed": self.seed if self.seed is not None else self._stream,
                       "noise_shape": None if self.noise_shape is None else
                       list(self.noise_shape)})
        return config


class Embedding(Layer):
    """Maps integer indices to dense vectors: ``embeddings[inputs]``.

    Input: integers of any shape ``(batch, ...)``; float inputs are cast to int32 (like
    Keras). Output: ``(batch, ..., output_dim)``.

    Indices must lie in ``[0, input_dim)``. The compiled graph cannot check this: the
    reference backend raises IndexError for an out-of-range index, a compiled kernel's
    behaviour is undefined (it may read another row). Check your data.

    Args:
        input_dim: vocabulary size.
        output_dim: embedding size.
        embeddings_initializer: default ``"uniform"`` (``RandomUniform(-0.05, 0.05)``).
        embeddings_regularizer: optional weight penalty.
        activity_regularizer: optional penalty on the output.
        embeddings_constraint: optional constraint.
        mask_zero: index 0 is padding: the output carries a mask ``inputs != 0`` that the
            next layers (RNNs, attention, masked pooling, the loss) honour, as in Keras; the
            vocabulary must then keep index 0 for padding.

    Example:
        >>> ids = kiln.Input((20,), dtype="int32")
        >>> vecs = kiln.layers.Embedding(10000, 64)(ids)    # (None, 20, 64)
    """

    def __init__(self, input_dim: int, output_dim: int, embeddings_initializer: Any = "uniform",
                 embeddings_regularizer: Any = None, embeddings_constraint: Any = None,
                 mask_zero: bool = False, weights: Any = None, lora_rank: int | None = None,
                 lora_alpha: float | None = None, quantization_config: Any = None, *,
                 activity_regularizer: Any = None, **kwargs: Any):
        drop_keras_extras("Embedding", {"lora_rank": lora_rank, "lora_alpha": lora_alpha,
                                        "quantization_config": quantization_config})
        input_length = kwargs.pop("input_length", None)  # Keras 2 configs
        if input_length is not None and "input_shape" not in kwargs:
            kwargs["input_shape"] = (input_length,)
        super().__init__(**kwargs)
        input_dim = positive_int("Embedding", "input_dim", input_dim)
        output_dim = positive_int("Embedding", "output_dim", output_dim)
        set_constraints(self, embeddings_constraint=embeddings_constraint)
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.embeddings_initializer = initializers.get(embeddings_initializer)
        self.embeddings_regularizer = regularizers.get(embeddings_regularizer)
        self.activity_regularizer = regularizers.get(activity_regularizer)
        self._initial_weights = weights
        self.mask_zero = bool(mask_zero)

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        if not self.mask_zero:
            return None
        return K.not_equal(inputs, K.constant(0, inputs.dtype))

    def build(self, input_shape: Any) -> None:
        self.embeddings = self.add_weight("embeddings", (self.input_dim, self.output_dim),
                                          self.embeddings_initializer,
                                          self.embeddings_regularizer)
        self.built = True
        if self._initial_weights is not None:
            self.set_weights(self._initial_weights)
            self._initial_weights = None

    def call(self, inputs: Node) -> Node:
        if inputs.dtype not in ("int32", "int64"):
            inputs = K.cast(inputs, "int32")
        out = K.take(self.embeddings, inputs, axis=0)
        add_activity_loss(self, self.activity_regularizer, out)
        return out

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "input_dim": self.input_dim,
            "output_dim": self.output_dim,
            "embeddings_initializer": initializers.serialize(self.embeddings_initializer),
            "embeddings_regularizer": regularizers.serialize(self.embeddings_regularizer),
            "activity_regularizer": regularizers.serialize(self.activity_regularizer),
            **constraint_config(self, "embeddings_constraint"),
            "mask_zero": self.mask_zero,
        })
        return config


class Masking(Layer):
    """Masks the time steps whose features all equal ``mask_value`` (padding): the output is
    the input with those steps zeroed, and carries a ``(batch, steps)`` mask that the next
    layers honour (RNNs keep their state over masked steps, attention ignores them, masked
    pooling and the loss skip them), as in Keras.

    Args:
        mask_value: the padding value (default 0.0).

    Example:
        >>> x = kiln.layers.Masking(0.0)(kiln.Input((None, 8)))
        >>> y = kiln.layers.LSTM(16)(x)
    """

    supports_masking = True

    def __init__(self, mask_value: float = 0.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.mask_value = float(mask_value)

    def _keep(self, inputs: Node) -> Node:
        differs = K.not_equal(inputs, K.constant(self.mask_value, inputs.dtype))
        return K.any(differs, axis=-1)

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        return self._keep(inputs)

    def call(self, inputs: Node) -> Node:
        keep = K.expand_dims(K.cast(self._keep(inputs), inputs.dtype), -1)
        return inputs * keep

    def get_config(self) -> dict:
        config = super().get_config()
        config["mask_value"] = self.mask_value
        return config


class Lambda(Layer):
    """Wraps a function of tensors as a layer (for quick experiments).

    The function must build its result with ``kiln.ops``. A Lambda layer cannot be saved
    with its model's config: a function cannot be stored safely, so ``get_config`` records
    only its name and ``from_config`` refuses. Write a ``Layer`` subclass for anything you
    want to save.

    Args:
        function: ``f(inputs, **arguments) -> tensor``.
        output_shape: ignored (shapes are inferred by tracing); kept for Keras compatibility.
        arguments: optional dict of keyword arguments passed to ``function``.

    Example:
        >>> y = kiln.layers.Lambda(lambda t: t * 2.0)(x)
    """

    serializable = False

    def __init__(self, function: Any, output_shape: Any = None, mask: Any = None,
                 arguments: dict | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        if not callable(function):
            raise TypeError(f"Lambda: function must be callable, received {function!r}")
        if mask is not None:
            raise ValueError("Lambda: mask is not supported by kiln")
        self.function = function
        self.output_shape = output_shape
        self.arguments = dict(arguments or {})

    def call(self, inputs: Any) -> Any:
        return self.function(inputs, **self.arguments)

    def get_config(self) -> dict:
        config = super().get_config()
        name = getattr(self.function, "__qualname__", repr(self.function))
        config["function"] = {"class_name": "__unserializable_function__", "config": name}
        return config

    @classmethod
    def from_config(cls, config: dict) -> Layer:
        fn = config.get("function")
        raise ValueError(f"Lambda layer {config.get('name')!r} cannot be loaded from a config: "
                         f"its function ({fn}) was not saved, because executing stored code is "
                         "unsafe. Recreate the layer in code, or write a Layer subclass")
