"""EfficientNetV2B0 ... B3, S, M, L ("EfficientNetV2: Smaller Models and Faster Training",
ICML 2021), as Keras 3.15's ``keras.applications.efficientnet_v2`` builds them, with Keras'
layer names. The models rescale (and for B0-B3 normalize) their input themselves
(``include_preprocessing=True``: pixels in [0, 255]); ``preprocess_input`` is the identity.

Example:
    >>> kiln.applications.EfficientNetV2B0(weights=None).count_params()
    7200312
"""

from __future__ import annotations

import math
from typing import Any

from kiln import initializers, layers
from kiln.applications import imagenet_utils as iu
from kiln.applications.efficientnet import conv_init, dense_init

WEIGHTS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/efficientnet_v2/"

_B = [(3, 1, 32, 16, 1, 0, 1, 1), (3, 2, 16, 32, 4, 0, 2, 1), (3, 2, 32, 48, 4, 0, 2, 1),
      (3, 3, 48, 96, 4, 0.25, 2, 0), (3, 5, 96, 112, 6, 0.25, 1, 0),
      (3, 8, 112, 192, 6, 0.25, 2, 0)]
#: per variant: (kernel_size, num_repeat, input_filters, output_filters, expand_ratio,
#: se_ratio, strides, conv_type (1: fused MBConv, 0: MBConv)) per stage
BLOCKS = {
    "b0": _B, "b1": _B, "b2": _B, "b3": _B,
    "s": [(3, 2, 24, 24, 1, 0, 1, 1), (3, 4, 24, 48, 4, 0, 2, 1), (3, 4, 48, 64, 4, 0, 2, 1),
          (3, 6, 64, 128, 4, 0.25, 2, 0), (3, 9, 128, 160, 6, 0.25, 1, 0),
          (3, 15, 160, 256, 6, 0.25, 2, 0)],
    "m": [(3, 3, 24, 24, 1, 0, 1, 1), (3, 5, 24, 48, 4, 0, 2, 1), (3, 5, 48, 80, 4, 0, 2, 1),
          (3, 7, 80, 160, 4, 0.25, 2, 0), (3, 14, 160, 176, 6, 0.25, 1, 0),
          (3, 18, 176, 304, 6, 0.25, 2, 0), (3, 5, 304, 512, 6, 0.25, 1, 0)],
    "l": [(3, 4, 32, 32, 1, 0, 1, 1), (3, 7, 32, 64, 4, 0, 2, 1), (3, 7, 64, 96, 4, 0, 2, 1),
          (3, 10, 96, 192, 4, 0.25, 2, 0), (3, 19, 192, 224, 6, 0.25, 1, 0),
          (3, 25, 224, 384, 6, 0.25, 2, 0), (3, 7, 384, 640, 6, 0.25, 1, 0)],
}
#: per variant: width, depth, default size, Keras' weight key
SCALES = {"b0": (1.0, 1.0, 224, "b0"), "b1": (1.0, 1.1, 240, "b1"), "b2": (1.1, 1.2, 260, "b2"),
          "b3": (1.2, 1.4, 300, "b3"), "s": (1.0, 1.0, 384, "-s"), "m": (1.0, 1.0, 480, "-m"),
          "l": (1.0, 1.0, 480, "-l")}


def round_filters(filters: float, width_coefficient: float, min_depth: int,
                  depth_divisor: int) -> int:
    filters *= width_coefficient
    minimum = min_depth or depth_divisor
    return int(max(minimum, int(filters + depth_divisor / 2) // depth_divisor * depth_divisor))


def _se(x: Any, input_filters: int, filters: int, se_ratio: float, activation: Any,
        name: str) -> Any:
    se = layers.GlobalAveragePooling2D(name=f"{name}se_squeeze")(x)
    se = layers.Reshape((1, 1, filters), name=f"{name}se_reshape")(se)
    se = layers.Conv2D(max(1, int(input_filters * se_ratio)), 1, padding="same",
                       activation=activation, kernel_initializer=conv_init(),
                       name=f"{name}se_reduce")(se)
    se = layers.Conv2D(filters, 1, padding="same", activation="sigmoid",
                       kernel_initializer=conv_init(), name=f"{name}se_expand")(se)
    return layers.multiply([x, se], name=f"{name}se_excite")


def _block(inputs: Any, fused: bool, input_filters: int, output_filters: int,
           expand_ratio: int, kernel_size: int, strides: int, se_ratio: float,
           bn_momentum: float, activation: Any, survival_probability: float, name: str) -> Any:
    """MBConv (``fused=False``: 1x1 expand, depthwise) or fused MBConv (one kxk expand)."""
    bn = {"axis": 3, "momentum": bn_momentum}
    filters = input_filters * expand_ratio
    x = inputs
    if expand_ratio != 1:
        k, s = (kernel_size, strides) if fused else (1, 1)
        x = layers.Conv2D(filters, kernel_size=k, strides=s, kernel_initializer=conv_init(),
                          padding="same", use_bias=False, name=f"{name}expand_conv")(x)
        x = layers.BatchNormalization(**bn, name=f"{name}expand_bn")(x)
        x = layers.Activation(activation, name=f"{name}expand_activation")(x)
    if not fused:
        x = layers.DepthwiseConv2D(kernel_size=kernel_size, strides=strides,
                                   depthwise_initializer=conv_init(), padding="same",
                                   use_bias=False, name=f"{name}dwconv2")(x)
        x = layers.BatchNormalization(**bn, name=f"{name}bn")(x)
        x = layers.Activation(activation, name=f"{name}activation")(x)
    if 0 < se_ratio <= 1:
        x = _se(x, input_filters, filters, se_ratio, activation, name)
    plain = fused and expand_ratio == 1  # the projection is the block's only conv
    x = layers.Conv2D(output_filters, kernel_size=kernel_size if plain else 1,
                      strides=strides if plain else 1, kernel_initializer=conv_init(),
                      padding="same", use_bias=False, name=f"{name}project_conv")(x)
    x = layers.BatchNormalization(**bn, name=f"{name}project_bn")(x)
    if plain:
        x = layers.Activation(activation, name=f"{name}project_activation")(x)
    if strides == 1 and input_filters == output_filters:
        if survival_probability:
            # Keras passes the survival probability as the dropout rate; kept for parity
            x = layers.Dropout(survival_probability, noise_shape=(None, 1, 1, 1),
                               name=f"{name}drop")(x)
        x = layers.add([x, inputs], name=f"{name}add")
    return x


def EfficientNetV2(variant: str, dropout_rate: float = 0.2,  # noqa: N802
                   drop_connect_rate: float = 0.2, depth_divisor: int = 8, min_depth: int = 8,
                   bn_momentum: float = 0.9, activation: Any = "swish",
                   blocks_args: Any = "default", name: str = "efficientnetv2",
                   include_top: bool = True, weights: Any = "imagenet",
                   input_tensor: Any = None, input_shape: Any = None,
                   pooling: str | None = None, classes: int = 1000,
                   classifier_activation: Any = "softmax",
                   include_preprocessing: bool = True) -> Any:
    """The EfficientNetV2 ``variant`` ("b0".."b3", "s", "m", "l"); ``blocks_args`` "default"
    or a list of stage tuples as in :data:`BLOCKS`."""
    width, depth, default_size, weights_key = SCALES[variant]
    stages = BLOCKS[variant] if blocks_args == "default" else blocks_args
    where = name
    iu.check_weights(weights, include_top, classes, where)
    input_shape = iu.obtain_input_shape(input_shape, default_size, 32, None, include_top,
                                        weights, where)
    img_input = iu.image_input(input_tensor, input_shape, where)
    x = img_input
    if include_preprocessing:
        if variant.startswith("b") and input_shape[-1] == 3:
            x = layers.Rescaling(scale=1.0 / 255)(x)
            x = layers.Normalization(mean=[0.485, 0.456, 0.406],
                                     variance=[0.229**2, 0.224**2, 0.225**2], axis=3)(x)
        else:
            x = layers.Rescaling(scale=1.0 / 128.0, offset=-1)(x)

    def rf(filters: float) -> int:
        return round_filters(filters, width, min_depth, depth_divisor)

    x = layers.Conv2D(rf(stages[0][2]), kernel_size=3, strides=2,
                      kernel_initializer=conv_init(), padding="same", use_bias=False,
                      name="stem_conv")(x)
    x = layers.BatchNormalization(axis=3, momentum=bn_momentum, name="stem_bn")(x)
    x = layers.Activation(activation, name="stem_activation")(x)
    b = 0
    total = float(sum(stage[1] for stage in stages))
    for i, (kernel, repeat, f_in, f_out, expand, se_ratio, strides, conv_type) in \
            enumerate(stages):
        if repeat <= 0:
            raise ValueError(f"{where}: the number of repeats must be > 0; received "
                             f"num_repeat={repeat}")
        f_in, f_out = rf(f_in), rf(f_out)
        for j in range(int(math.ceil(depth * repeat))):
            if j > 0:
                strides, f_in = 1, f_out
            x = _block(x, conv_type == 1, f_in, f_out, expand, kernel, strides, se_ratio,
                       bn_momentum, activation, drop_connect_rate * b / total,
                       name=f"block{i + 1}{chr(j + 97)}_")
            b += 1
    x = layers.Conv2D(rf(1280), kernel_size=1, strides=1, kernel_initializer=conv_init(),
                      padding="same", use_bias=False, name="top_conv")(x)
    x = layers.BatchNormalization(axis=3, momentum=bn_momentum, name="top_bn")(x)
    x = layers.Activation(activation, name="top_activation")(x)
    if include_top:
        x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
        if dropout_rate > 0:
            x = layers.Dropout(dropout_rate, name="top_dropout")(x)
        iu.validate_activation(classifier_activation, weights, where)
        x = layers.Dense(classes, activation=classifier_activation,
                         kernel_initializer=dense_init(),
                         bias_initializer=initializers.Constant(0.0), name="predictions")(x)
    else:
        x = iu.pooled(x, pooling)
    fname = name + (".h5" if include_top else "_notop.h5")
    return iu.finish(img_input, input_tensor, x, name, weights,
                     (fname, WEIGHTS_URL + fname) if weights_key else None, where)


def _make(variant: str) -> Any:
    def fn(include_top: bool = True, weights: Any = "imagenet", input_tensor: Any = None,
           input_shape: Any = None, pooling: str | None = None, classes: int = 1000,
           classifier_activation: Any = "softmax", include_preprocessing: bool = True,
           name: str = f"efficientnetv2-{variant}") -> Any:
        return EfficientNetV2(variant, name=name, include_top=include_top, weights=weights,
                              input_tensor=input_tensor, input_shape=input_shape,
                              pooling=pooling, classes=classes,
                              classifier_activation=classifier_activation,
                              include_preprocessing=include_preprocessing)

    fn.__name__ = fn.__qualname__ = f"EfficientNetV2{variant.upper()}"
    fn.__doc__ = f"""Instantiates the EfficientNetV2{variant.upper()} architecture (Keras'
    ``keras.applications.EfficientNetV2{variant.upper()}``; default input
    {SCALES[variant][2]}x{SCALES[variant][2]}).

    Args:
        include_top, weights, input_tensor, input_shape, pooling, classes,
        classifier_activation, name: as in ``ResNet50`` (input sides >= 32).
        include_preprocessing: rescale [0, 255] pixels inside the model.

    Returns:
        A functional ``kiln.Model``.
    """
    return fn


EfficientNetV2B0 = _make("b0")
EfficientNetV2B1 = _make("b1")
EfficientNetV2B2 = _make("b2")
EfficientNetV2B3 = _make("b3")
EfficientNetV2S = _make("s")
EfficientNetV2M = _make("m")
EfficientNetV2L = _make("l")


def preprocess_input(x: Any, data_format: str | None = None) -> Any:
    """The identity: EfficientNetV2 rescales its input itself."""
    return x


decode_predictions = iu.decode_predictions
