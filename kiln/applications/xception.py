"""Xception ("Xception: Deep Learning with Depthwise Separable Convolutions", CVPR 2017), as
Keras 3.15's ``keras.applications.xception`` builds it, with Keras' layer names (its four
residual projections and their batch norms are unnamed in Keras too).

Example:
    >>> kiln.applications.Xception(weights=None).count_params()
    22910480
"""

from __future__ import annotations

from typing import Any

from kiln import layers
from kiln.applications import imagenet_utils as iu

WEIGHTS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/xception/"


def _sep_bn(x: Any, filters: int, name: str, act: bool = True) -> Any:
    """[ReLU], 3x3 separable conv, batch norm (Keras' ``{name}_act``, ``{name}``,
    ``{name}_bn``)."""
    if act:
        x = layers.Activation("relu", name=f"{name}_act")(x)
    x = layers.SeparableConv2D(filters, (3, 3), padding="same", use_bias=False, name=name)(x)
    return layers.BatchNormalization(axis=-1, name=f"{name}_bn")(x)


def _projection(x: Any, filters: int) -> Any:
    residual = layers.Conv2D(filters, (1, 1), strides=(2, 2), padding="same", use_bias=False)(x)
    return layers.BatchNormalization(axis=-1)(residual)


def Xception(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
             input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
             classes: int = 1000, classifier_activation: Any = "softmax",
             name: str = "xception") -> Any:
    """Instantiates the Xception architecture (Keras' ``keras.applications.Xception``).

    Args:
        include_top, weights, input_tensor, input_shape, pooling, classes,
        classifier_activation, name: as in ``ResNet50``; the default input is 299x299 and
            the smallest 71x71.

    Returns:
        A functional ``kiln.Model``; inputs go through ``xception.preprocess_input`` (tf).
    """
    where = name
    iu.check_weights(weights, include_top, classes, where)
    input_shape = iu.obtain_input_shape(input_shape, 299, 71, None, include_top, weights,
                                        where)
    img_input = iu.image_input(input_tensor, input_shape, where)
    x = layers.Conv2D(32, (3, 3), strides=(2, 2), use_bias=False, name="block1_conv1")(img_input)
    x = layers.BatchNormalization(axis=-1, name="block1_conv1_bn")(x)
    x = layers.Activation("relu", name="block1_conv1_act")(x)
    x = layers.Conv2D(64, (3, 3), use_bias=False, name="block1_conv2")(x)
    x = layers.BatchNormalization(axis=-1, name="block1_conv2_bn")(x)
    x = layers.Activation("relu", name="block1_conv2_act")(x)
    # entry flow: blocks 2-4 (block 2 starts without the ReLU: block1 ends with one)
    for block, filters in ((2, 128), (3, 256), (4, 728)):
        residual = _projection(x, filters)
        if block == 2:
            x = _sep_bn(x, filters, "block2_sepconv1", act=False)
        else:
            x = _sep_bn(x, filters, f"block{block}_sepconv1")
        x = _sep_bn(x, filters, f"block{block}_sepconv2")
        x = layers.MaxPooling2D((3, 3), strides=(2, 2), padding="same",
                                name=f"block{block}_pool")(x)
        x = layers.add([x, residual])
    # middle flow: blocks 5-12
    for i in range(8):
        residual = x
        for j in (1, 2, 3):
            x = _sep_bn(x, 728, f"block{i + 5}_sepconv{j}")
        x = layers.add([x, residual])
    # exit flow
    residual = _projection(x, 1024)
    x = _sep_bn(x, 728, "block13_sepconv1")
    x = _sep_bn(x, 1024, "block13_sepconv2")
    x = layers.MaxPooling2D((3, 3), strides=(2, 2), padding="same", name="block13_pool")(x)
    x = layers.add([x, residual])
    x = layers.SeparableConv2D(1536, (3, 3), padding="same", use_bias=False,
                               name="block14_sepconv1")(x)
    x = layers.BatchNormalization(axis=-1, name="block14_sepconv1_bn")(x)
    x = layers.Activation("relu", name="block14_sepconv1_act")(x)
    x = layers.SeparableConv2D(2048, (3, 3), padding="same", use_bias=False,
                               name="block14_sepconv2")(x)
    x = layers.BatchNormalization(axis=-1, name="block14_sepconv2_bn")(x)
    x = layers.Activation("relu", name="block14_sepconv2_act")(x)
    if include_top:
        x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
        iu.validate_activation(classifier_activation, weights, where)
        x = layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    else:
        x = iu.pooled(x, pooling, None, None)
    fname = f"xception_weights_tf_dim_ordering_tf_kernels{'' if include_top else '_notop'}.h5"
    return iu.finish(img_input, input_tensor, x, name, weights, (fname, WEIGHTS_URL + fname),
                     where)


def preprocess_input(x: Any, data_format: str | None = None) -> Any:
    """Xception's preprocessing: tf mode (pixels scaled to [-1, 1])."""
    return iu.preprocess_input(x, data_format=data_format, mode="tf")


decode_predictions = iu.decode_predictions
