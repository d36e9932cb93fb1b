"""MobileNet ("MobileNets: Efficient Convolutional Neural Networks for Mobile Vision
Applications", 2017) and MobileNetV2 ("MobileNetV2: Inverted Residuals and Linear
Bottlenecks", CVPR 2018), as Keras 3.15's ``keras.applications.mobilenet`` /
``mobilenet_v2`` build them, with Keras' layer names.

Example:
    >>> kiln.applications.MobileNetV2(weights=None).count_params()
    3538984
"""

from __future__ import annotations

import warnings
from typing import Any

from kiln import layers
from kiln.applications import imagenet_utils as iu

WEIGHTS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/"


def make_divisible(v: float, divisor: int, min_value: int | None = None) -> int:
    """``v`` rounded to a multiple of ``divisor``, never more than 10% below ``v``."""
    min_value = divisor if min_value is None else min_value
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _sizes(input_shape: Any, input_tensor: Any, include_top: bool, weights: Any,
           known: tuple[int, ...], where: str) -> tuple[tuple, int]:
    """The input shape and the image size that names the ImageNet weight file."""
    probe = input_shape
    if probe is None and input_tensor is not None and hasattr(input_tensor, "shape"):
        probe = tuple(input_tensor.shape)[1:]
    default_size = 224
    if probe is not None and len(probe) == 3 and probe[0] == probe[1] and probe[0] in known:
        default_size = probe[0]
    input_shape = iu.obtain_input_shape(input_shape, default_size, 32, None, include_top,
                                        weights, where)
    rows = input_shape[0]
    if weights == "imagenet" and (rows != input_shape[1] or rows not in known):
        rows = 224
        warnings.warn(f"{where}: input_shape is undefined or non-square, or its size is not "
                      f"in {list(known)}; the weights for input shape (224, 224) are loaded",
                      stacklevel=3)
    return input_shape, rows


# ---- MobileNet (v1) ---------------------------------------------------------------------------
def _conv_block(x: Any, filters: int, alpha: float, kernel: Any = (3, 3),
                strides: Any = (1, 1)) -> Any:
    x = layers.Conv2D(int(filters * alpha), kernel, padding="same", use_bias=False,
                      strides=strides, name="conv1")(x)
    x = layers.BatchNormalization(axis=-1, name="conv1_bn")(x)
    return layers.ReLU(6.0, name="conv1_relu")(x)


def _depthwise_conv_block(x: Any, pointwise_filters: int, alpha: float,
                          depth_multiplier: int = 1, strides: Any = (1, 1),
                          block_id: int = 1) -> Any:
    if strides != (1, 1):
        x = layers.ZeroPadding2D(((0, 1), (0, 1)), name=f"conv_pad_{block_id}")(x)
    x = layers.DepthwiseConv2D((3, 3), padding="same" if strides == (1, 1) else "valid",
                               depth_multiplier=depth_multiplier, strides=strides,
                               use_bias=False, name=f"conv_dw_{block_id}")(x)
    x = layers.BatchNormalization(axis=-1, name=f"conv_dw_{block_id}_bn")(x)
    x = layers.ReLU(6.0, name=f"conv_dw_{block_id}_relu")(x)
    x = layers.Conv2D(int(pointwise_filters * alpha), (1, 1), padding="same", use_bias=False,
                      strides=(1, 1), name=f"conv_pw_{block_id}")(x)
    x = layers.BatchNormalization(axis=-1, name=f"conv_pw_{block_id}_bn")(x)
    return layers.ReLU(6.0, name=f"conv_pw_{block_id}_relu")(x)


#: (pointwise filters, stride) of the 13 depthwise blocks
_V1_BLOCKS = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5,
              (1024, 2), (1024, 1)]


def MobileNet(input_shape: Any = None, alpha: float = 1.0,  # noqa: N802
              depth_multiplier: int = 1, dropout: float = 1e-3, include_top: bool = True,
              weights: Any = "imagenet", input_tensor: Any = None, pooling: str | None = None,
              classes: int = 1000, classifier_activation: Any = "softmax",
              name: str | None = None) -> Any:
    """Instantiates the MobileNet architecture (Keras' ``keras.applications.MobileNet``).

    Args:
        input_shape: (H, W, C) with H, W >= 32; default (224, 224, 3) with the top.
        alpha: width multiplier of every layer (ImageNet weights: 0.25, 0.5, 0.75, 1.0).
        depth_multiplier: of the depthwise convolutions (1 with ImageNet weights).
        dropout: rate before the classifier.
        include_top, weights, input_tensor, pooling, classes, classifier_activation: as in
            ``ResNet50``.
        name: the model's name (default ``mobilenet_{alpha:.2f}_{rows}``).

    Returns:
        A functional ``kiln.Model``; inputs go through ``mobilenet.preprocess_input`` (tf).
    """
    where = name or "MobileNet"
    iu.check_weights(weights, include_top, classes, where)
    input_shape, rows = _sizes(input_shape, input_tensor, include_top, weights,
                               (128, 160, 192, 224), where)
    if weights == "imagenet":
        if depth_multiplier != 1:
            raise ValueError(f"{where}: with ImageNet weights depth_multiplier must be 1; "
                             f"received depth_multiplier={depth_multiplier}")
        if alpha not in (0.25, 0.50, 0.75, 1.0):
            raise ValueError(f"{where}: with ImageNet weights alpha must be one of 0.25, "
                             f"0.50, 0.75 or 1.0; received alpha={alpha}")
    img_input = iu.image_input(input_tensor, input_shape, where)
    x = _conv_block(img_input, 32, alpha, strides=(2, 2))
    for block_id, (filters, stride) in enumerate(_V1_BLOCKS, 1):
        x = _depthwise_conv_block(x, filters, alpha, depth_multiplier,
                                  strides=(stride, stride), block_id=block_id)
    if include_top:
        x = layers.GlobalAveragePooling2D(keepdims=True)(x)
        x = layers.Dropout(dropout, name="dropout")(x)
        x = layers.Conv2D(classes, (1, 1), padding="same", name="conv_preds")(x)
        x = layers.Reshape((classes,), name="reshape_2")(x)
        iu.validate_activation(classifier_activation, weights, where)
        x = layers.Activation(activation=classifier_activation, name="predictions")(x)
    else:
        x = iu.pooled(x, pooling, None, None)
    name = name or f"mobilenet_{alpha:0.2f}_{rows}"
    alpha_text = {1.0: "1_0", 0.75: "7_5", 0.5: "5_0"}.get(alpha, "2_5")
    fname = f"mobilenet_{alpha_text}_{rows}_tf{'' if include_top else '_no_top'}.h5"
    return iu.finish(img_input, input_tensor, x, name, weights,
                     (fname, f"{WEIGHTS_URL}mobilenet/{fname}"), where)


# ---- MobileNetV2 ------------------------------------------------------------------------------
def _inverted_res_block(inputs: Any, expansion: int, stride: int, alpha: float, filters: int,
                        block_id: int) -> Any:
    in_channels = inputs.shape[-1]
    pointwise_filters = make_divisible(int(filters * alpha), 8)
    x = inputs
    prefix = f"block_{block_id}_"
    bn = {"axis": -1, "epsilon": 1e-3, "momentum": 0.999}
    if block_id:
        x = layers.Conv2D(expansion * in_channels, kernel_size=1, padding="same",
                          use_bias=False, activation=None, name=f"{prefix}expand")(x)
        x = layers.BatchNormalization(**bn, name=f"{prefix}expand_BN")(x)
        x = layers.ReLU(6.0, name=f"{prefix}expand_relu")(x)
    else:
        prefix = "expanded_conv_"
    if stride == 2:
        x = layers.ZeroPadding2D(padding=iu.correct_pad(x, 3), name=f"{prefix}pad")(x)
    x = layers.DepthwiseConv2D(kernel_size=3, strides=stride, activation=None, use_bias=False,
                               padding="same" if stride == 1 else "valid",
                               name=f"{prefix}depthwise")(x)
    x = layers.BatchNormalization(**bn, name=f"{prefix}depthwise_BN")(x)
    x = layers.ReLU(6.0, name=f"{prefix}depthwise_relu")(x)
    x = layers.Conv2D(pointwise_filters, kernel_size=1, padding="same", use_bias=False,
                      activation=None, name=f"{prefix}project")(x)
    x = layers.BatchNormalization(**bn, name=f"{prefix}project_BN")(x)
    if in_channels == pointwise_filters and stride == 1:
        return layers.Add(name=f"{prefix}add")([inputs, x])
    return x


#: (filters, stride, expansion) of the 17 inverted residual blocks
_V2_BLOCKS = [(16, 1, 1), (24, 2, 6), (24, 1, 6), (32, 2, 6), (32, 1, 6), (32, 1, 6),
              (64, 2, 6), (64, 1, 6), (64, 1, 6), (64, 1, 6), (96, 1, 6), (96, 1, 6),
              (96, 1, 6), (160, 2, 6), (160, 1, 6), (160, 1, 6), (320, 1, 6)]


def MobileNetV2(input_shape: Any = None, alpha: float = 1.0,  # noqa: N802
                include_top: bool = True, weights: Any = "imagenet", input_tensor: Any = None,
                pooling: str | None = None, classes: int = 1000,
                classifier_activation: Any = "softmax", name: str | None = None) -> Any:
    """Instantiates the MobileNetV2 architecture (Keras' ``keras.applications.MobileNetV2``).

    Args:
        input_shape: (H, W, C) with H, W >= 32; default (224, 224, 3) with the top.
        alpha: width multiplier (ImageNet weights: 0.35, 0.5, 0.75, 1.0, 1.3, 1.4).
        include_top, weights, input_tensor, pooling, classes, classifier_activation: as in
            ``ResNet50``.
        name: the model's name (default ``mobilenetv2_{alpha:.2f}_{rows}``).

    Returns:
        A functional ``kiln.Model``; inputs go through ``mobilenet_v2.preprocess_input`` (tf).
    """
    where = name or "MobileNetV2"
    iu.check_weights(weights, include_top, classes, where)
    if input_shape is not None and input_tensor is not None and iu.is_symbolic(input_tensor):
        if tuple(input_tensor.shape)[2] != tuple(input_shape)[1]:
            raise ValueError(f"{where}: input_tensor.shape[2] must equal input_shape[1]; "
                             f"received input_tensor.shape={tuple(input_tensor.shape)}, "
                             f"input_shape={tuple(input_shape)}")
    input_shape, rows = _sizes(input_shape, input_tensor, include_top, weights,
                               (96, 128, 160, 192, 224), where)
    if weights == "imagenet" and alpha not in (0.35, 0.50, 0.75, 1.0, 1.3, 1.4):
        raise ValueError(f"{where}: with ImageNet weights alpha must be one of 0.35, 0.50, "
                         f"0.75, 1.0, 1.3 or 1.4; received alpha={alpha}")
    img_input = iu.image_input(input_tensor, input_shape, where)
    bn = {"axis": -1, "epsilon": 1e-3, "momentum": 0.999}
    x = layers.Conv2D(make_divisible(32 * alpha, 8), kernel_size=3, strides=(2, 2),
                      padding="same", use_bias=False, name="Conv1")(img_input)
    x = layers.BatchNormalization(**bn, name="bn_Conv1")(x)
    x = layers.ReLU(6.0, name="Conv1_relu")(x)
    for block_id, (filters, stride, expansion) in enumerate(_V2_BLOCKS):
        x = _inverted_res_block(x, filters=filters, alpha=alpha, stride=stride,
                                expansion=expansion, block_id=block_id)
    last = make_divisible(1280 * alpha, 8) if alpha > 1.0 else 1280
    x = layers.Conv2D(last, kernel_size=1, use_bias=False, name="Conv_1")(x)
    x = layers.BatchNormalization(**bn, name="Conv_1_bn")(x)
    x = layers.ReLU(6.0, name="out_relu")(x)
    if include_top:
        x = layers.GlobalAveragePooling2D()(x)
        iu.validate_activation(classifier_activation, weights, where)
        x = layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    else:
        x = iu.pooled(x, pooling, None, None)
    name = name or f"mobilenetv2_{alpha:0.2f}_{rows}"
    fname = (f"mobilenet_v2_weights_tf_dim_ordering_tf_kernels_{float(alpha)}_{rows}"
             f"{'' if include_top else '_no_top'}.h5")
    return iu.finish(img_input, input_tensor, x, name, weights,
                     (fname, f"{WEIGHTS_URL}mobilenet_v2/{fname}"), where)


def preprocess_input(x: Any, data_format: str | None = None) -> Any:
    """MobileNet's preprocessing: tf mode (pixels scaled to [-1, 1])."""
    return iu.preprocess_input(x, data_format=data_format, mode="tf")


decode_predictions = iu.decode_predictions
