"""ConvNeXtTiny/Small/Base/Large/XLarge ("A ConvNet for the 2020s", CVPR 2022), as Keras
3.15's ``keras.applications.convnext`` builds them, with Keras' layer names (the stem and the
downsampling stages are nested ``Sequential`` models, as in Keras). The models normalize
their input themselves (``include_preprocessing=True``: pixels in [0, 255]);
``preprocess_input`` is the identity.

Example:
    >>> kiln.applications.ConvNeXtTiny(weights=None).count_params()
    28589128
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln import initializers, layers
from kiln.applications import imagenet_utils as iu
from kiln.registry import register_builtin

WEIGHTS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/convnext/"

MODEL_CONFIGS = {
    "tiny": ([3, 3, 9, 3], [96, 192, 384, 768]),
    "small": ([3, 3, 27, 3], [96, 192, 384, 768]),
    "base": ([3, 3, 27, 3], [128, 256, 512, 1024]),
    "large": ([3, 3, 27, 3], [192, 384, 768, 1536]),
    "xlarge": ([3, 3, 27, 3], [256, 512, 1024, 2048]),
}


class LayerScale(layers.Layer):
    """Multiplies its input by a learned per-channel scale ``gamma`` (initially
    ``init_values``); Keras' ``convnext.LayerScale``."""

    def __init__(self, init_values: float, projection_dim: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.init_values = init_values
        self.projection_dim = projection_dim

    def build(self, input_shape: Any) -> None:
        self.gamma = self.add_weight(shape=(self.projection_dim,),
                                     initializer=initializers.Constant(self.init_values),
                                     trainable=True, name="gamma")

    def call(self, x: Any) -> Any:
        return x * self.gamma

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "init_values": self.init_values,
                "projection_dim": self.projection_dim}


register_builtin("LayerScale", LayerScale)


def ConvNeXtBlock(projection_dim: int, drop_path_rate: float = 0.0,  # noqa: N802
                  layer_scale_init_value: float | None = 1e-6, name: str = "convnext_block"
                  ) -> Any:
    """The block: 7x7 depthwise conv, LayerNorm, 4x MLP with GELU, layer scale, residual.
    Stochastic depth (``drop_path_rate > 0``) drops the branch per sample while training."""

    def apply(inputs: Any) -> Any:
        x = layers.Conv2D(filters=projection_dim, kernel_size=7, padding="same",
                          groups=projection_dim, name=f"{name}_depthwise_conv")(inputs)
        x = layers.LayerNormalization(epsilon=1e-6, name=f"{name}_layernorm")(x)
        x = layers.Dense(4 * projection_dim, name=f"{name}_pointwise_conv_1")(x)
        x = layers.Activation("gelu", name=f"{name}_gelu")(x)
        x = layers.Dense(projection_dim, name=f"{name}_pointwise_conv_2")(x)
        if layer_scale_init_value is not None:
            x = LayerScale(layer_scale_init_value, projection_dim,
                           name=f"{name}_layer_scale")(x)
        if drop_path_rate:
            # stochastic depth = dropout with one draw per sample (scaled by 1 / keep)
            branch = layers.Dropout(drop_path_rate, noise_shape=(None, 1, 1, 1),
                                    name=f"{name}_stochastic_depth")
        else:
            branch = layers.Activation("linear", name=f"{name}_identity")
        return layers.Add()([inputs, branch(x)])  # a layer: the config serializes

    return apply


def ConvNeXt(depths: Any, projection_dims: Any, drop_path_rate: float = 0.0,  # noqa: N802
             layer_scale_init_value: float | None = 1e-6, default_size: int = 224,
             name: str = "convnext", include_preprocessing: bool = True,
             include_top: bool = True, weights: Any = None, input_tensor: Any = None,
             input_shape: Any = None, pooling: str | None = None, classes: int = 1000,
             classifier_activation: Any = "softmax", weights_name: str | None = None) -> Any:
    """A ConvNeXt of four stages with ``depths`` blocks of ``projection_dims`` channels."""
    from kiln.models import Sequential

    where = name
    iu.check_weights(weights, include_top, classes, where)
    input_shape = iu.obtain_input_shape(input_shape, default_size, 32, None, include_top,
                                        weights, where)
    img_input = iu.image_input(input_tensor, input_shape, where)
    x = img_input
    if include_preprocessing and input_shape[-1] == 3:
        x = layers.Normalization(mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                 variance=[(0.229 * 255) ** 2, (0.224 * 255) ** 2,
                                           (0.225 * 255) ** 2],
                                 name=f"{name}_prestem_normalization")(x)
    stages = [Sequential([layers.Conv2D(projection_dims[0], kernel_size=4, strides=4,
                                        name=f"{name}_stem_conv"),
                          layers.LayerNormalization(epsilon=1e-6,
                                                    name=f"{name}_stem_layernorm")],
                         name=f"{name}_stem")]
    for i in range(3):
        stages.append(Sequential([
            layers.LayerNormalization(epsilon=1e-6, name=f"{name}_downsampling_layernorm_{i}"),
            layers.Conv2D(projection_dims[i + 1], kernel_size=2, strides=2,
                          name=f"{name}_downsampling_conv_{i}")],
            name=f"{name}_downsampling_block_{i}"))
    rates = [float(r) for r in np.linspace(0.0, drop_path_rate, sum(depths))]
    cur = 0
    for i in range(4):
        x = stages[i](x)
        for j in range(depths[i]):
            x = ConvNeXtBlock(projection_dims[i], rates[cur + j], layer_scale_init_value,
                              name=f"{name}_stage_{i}_block_{j}")(x)
        cur += depths[i]
    if include_top:
        iu.validate_activation(classifier_activation, weights, where)
        x = layers.GlobalAveragePooling2D(name=f"{name}_head_gap")(x)
        x = layers.LayerNormalization(epsilon=1e-6, name=f"{name}_head_layernorm")(x)
        x = layers.Dense(classes, activation=classifier_activation,
                         name=f"{name}_head_dense")(x)
    else:
        x = iu.pooled(x, pooling, None, None)
        x = layers.LayerNormalization(epsilon=1e-6)(x)
    file = None
    if weights_name is not None:
        if weights == "imagenet":
            want = MODEL_CONFIGS[weights_name.split("convnext_")[-1]]
            if (list(depths), list(projection_dims)) != (want[0], want[1]):
                raise ValueError(f"{where}: the architecture does not match {weights_name}'s "
                                 f"ImageNet weights: expected depths {want[0]} and "
                                 f"projection_dims {want[1]}, received {list(depths)} and "
                                 f"{list(projection_dims)}")
            if weights_name not in name:
                raise ValueError(f"{where}: with ImageNet weights the model name must contain "
                                 f"{weights_name!r} (the weight file is named after it); "
                                 f"received name={name!r}")
        fname = name + (".h5" if include_top else "_notop.h5")
        file = (fname, WEIGHTS_URL + fname)
    return iu.finish(img_input, input_tensor, x, name, weights, file, where)


def _make(size: str) -> Any:
    def fn(include_top: bool = True, include_preprocessing: bool = True,
           weights: Any = "imagenet", input_tensor: Any = None, input_shape: Any = None,
           pooling: str | None = None, classes: int = 1000,
           classifier_activation: Any = "softmax", name: str = f"convnext_{size}") -> Any:
        depths, dims = MODEL_CONFIGS[size]
        return ConvNeXt(depths, dims, 0.0, 1e-6, 224, name, include_preprocessing,
                        include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, weights_name=f"convnext_{size}")

    title = "XLarge" if size == "xlarge" else size.capitalize()
    fn.__name__ = fn.__qualname__ = f"ConvNeXt{title}"
    fn.__doc__ = f"""Instantiates the ConvNeXt{title} architecture (Keras'
    ``keras.applications.ConvNeXt{title}``).

    Args:
        include_top, weights, input_tensor, input_shape, pooling, classes,
        classifier_activation, name: as in ``ResNet50`` (input sides >= 32).
        include_preprocessing: normalize [0, 255] pixels inside the model.

    Returns:
        A functional ``kiln.Model``.
    """
    return fn


ConvNeXtTiny = _make("tiny")
ConvNeXtSmall = _make("small")
ConvNeXtBase = _make("base")
ConvNeXtLarge = _make("large")
ConvNeXtXLarge = _make("xlarge")


def preprocess_input(x: Any, data_format: str | None = None) -> Any:
    """The identity: ConvNeXt normalizes its input itself."""
    return x


decode_predictions = iu.decode_predictions
