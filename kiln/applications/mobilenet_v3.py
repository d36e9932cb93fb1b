"""MobileNetV3Small and MobileNetV3Large ("Searching for MobileNetV3", ICCV 2019), as Keras
3.15's ``keras.applications.mobilenet_v3`` builds them, with Keras' layer names. The models
rescale their input themselves (``include_preprocessing=True``): they take pixels in [0, 255],
and ``preprocess_input`` is the identity.

Example:
    >>> kiln.applications.MobileNetV3Small(weights=None).count_params()
    2554968
"""

from __future__ import annotations

import warnings
from typing import Any

from kiln import layers
from kiln.applications import imagenet_utils as iu
from kiln.applications.mobilenet import make_divisible as _depth

WEIGHTS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/mobilenet_v3/"
_BN = {"axis": -1, "epsilon": 1e-3, "momentum": 0.999}


def relu(x: Any) -> Any:
    return layers.ReLU()(x)


def hard_sigmoid(x: Any) -> Any:
    # relu6(x + 3) / 6, as Keras computes it, in layers (no weights) so that the model's
    # config serializes (kiln saves no raw ops between layers)
    x = layers.Rescaling(1.0, offset=3.0)(x)
    return layers.Rescaling(1.0 / 6.0)(layers.ReLU(6.0)(x))


def hard_swish(x: Any) -> Any:
    return layers.Activation("hard_swish")(x)


def _se_block(inputs: Any, filters: int, se_ratio: float, prefix: str) -> Any:
    x = layers.GlobalAveragePooling2D(keepdims=True, name=f"{prefix}squeeze_excite_avg_pool")(
        inputs)
    x = layers.Conv2D(_depth(filters * se_ratio, 8), kernel_size=1, padding="same",
                      name=f"{prefix}squeeze_excite_conv")(x)
    x = layers.ReLU(name=f"{prefix}squeeze_excite_relu")(x)
    x = layers.Conv2D(filters, kernel_size=1, padding="same",
                      name=f"{prefix}squeeze_excite_conv_1")(x)
    x = hard_sigmoid(x)
    return layers.Multiply(name=f"{prefix}squeeze_excite_mul")([inputs, x])


def _inverted_res_block(x: Any, expansion: float, filters: int, kernel_size: int, stride: int,
                        se_ratio: float | None, activation: Any, block_id: int) -> Any:
    shortcut = x
    prefix = "expanded_conv_"
    infilters = x.shape[-1]
    if block_id:
        prefix = f"expanded_conv_{block_id}_"
        x = layers.Conv2D(_depth(infilters * expansion, 8), kernel_size=1, padding="same",
                          use_bias=False, name=f"{prefix}expand")(x)
        x = layers.BatchNormalization(**_BN, name=f"{prefix}expand_bn")(x)
        x = activation(x)
    if stride == 2:
        x = layers.ZeroPadding2D(padding=iu.correct_pad(x, kernel_size),
                                 name=f"{prefix}depthwise_pad")(x)
    x = layers.DepthwiseConv2D(kernel_size, strides=stride,
                               padding="same" if stride == 1 else "valid", use_bias=False,
                               name=f"{prefix}depthwise")(x)
    x = layers.BatchNormalization(**_BN, name=f"{prefix}depthwise_bn")(x)
    x = activation(x)
    if se_ratio:
        x = _se_block(x, _depth(infilters * expansion, 8), se_ratio, prefix)
    x = layers.Conv2D(filters, kernel_size=1, padding="same", use_bias=False,
                      name=f"{prefix}project")(x)
    x = layers.BatchNormalization(**_BN, name=f"{prefix}project_bn")(x)
    if stride == 1 and infilters == filters:
        x = layers.Add(name=f"{prefix}add")([shortcut, x])
    return x


#: (expansion, filters, kernel ("k": the model's kernel), stride, squeeze-excite, "act":
#: the model's activation or relu) per block
_SMALL = [(1, 16, 3, 2, True, "relu"), (72 / 16, 24, 3, 2, False, "relu"),
          (88 / 24, 24, 3, 1, False, "relu"), (4, 40, "k", 2, True, "act"),
          (6, 40, "k", 1, True, "act"), (6, 40, "k", 1, True, "act"),
          (3, 48, "k", 1, True, "act"), (3, 48, "k", 1, True, "act"),
          (6, 96, "k", 2, True, "act"), (6, 96, "k", 1, True, "act"),
          (6, 96, "k", 1, True, "act")]
_LARGE = [(1, 16, 3, 1, False, "relu"), (4, 24, 3, 2, False, "relu"),
          (3, 24, 3, 1, False, "relu"), (3, 40, "k", 2, True, "relu"),
          (3, 40, "k", 1, True, "relu"), (3, 40, "k", 1, True, "relu"),
          (6, 80, 3, 2, False, "act"), (2.5, 80, 3, 1, False, "act"),
          (2.3, 80, 3, 1, False, "act"), (2.3, 80, 3, 1, False, "act"),
          (6, 112, 3, 1, True, "act"), (6, 112, 3, 1, True, "act"),
          (6, 160, "k", 2, True, "act"), (6, 160, "k", 1, True, "act"),
          (6, 160, "k", 1, True, "act")]


def MobileNetV3(blocks: list, last_point_ch: int, input_shape: Any = None,  # noqa: N802
                alpha: float = 1.0, model_type: str = "large", minimalistic: bool = False,
                include_top: bool = True, weights: Any = "imagenet", input_tensor: Any = None,
                classes: int = 1000, pooling: str | None = None, dropout_rate: float = 0.2,
                classifier_activation: Any = "softmax", include_preprocessing: bool = True,
                name: str | None = None) -> Any:
    """The MobileNetV3 body over ``blocks`` (the table of inverted residual blocks)."""
    where = name or "MobileNetV3"
    iu.check_weights(weights, include_top, classes, where)
    if input_tensor is not None and not iu.is_symbolic(input_tensor):
        raise ValueError(f"{where}: input_tensor must be a symbolic tensor; received "
                         f"{type(input_tensor).__name__}")
    if input_shape is not None and input_tensor is not None and \
            tuple(input_tensor.shape)[2] != tuple(input_shape)[1]:
        raise ValueError(f"{where}: input_shape[1] must equal input_tensor.shape[2]; received "
                         f"input_shape={tuple(input_shape)}, "
                         f"input_tensor.shape={tuple(input_tensor.shape)}")
    if input_shape is None and input_tensor is not None:
        rows, cols = tuple(input_tensor.shape)[1:3]
        input_shape = (cols, rows, 3)
    input_shape = tuple(input_shape) if input_shape is not None else (None, None, 3)
    rows, cols = input_shape[0], input_shape[1]
    if rows and cols and (rows < 32 or cols < 32):
        raise ValueError(f"{where}: input size must be at least 32x32; received "
                         f"input_shape={input_shape}")
    if weights == "imagenet":
        if (not minimalistic and alpha not in (0.75, 1.0)) or (minimalistic and alpha != 1.0):
            raise ValueError(f"{where}: with ImageNet weights alpha can be 0.75 or 1.0 (not "
                             f"minimalistic) or 1.0 (minimalistic); received alpha={alpha}")
        if rows != cols or rows != 224:
            warnings.warn(f"{where}: input_shape is undefined or non-square, or rows is not "
                          "224; the weights for input shape (224, 224) are loaded",
                          stacklevel=3)
    img_input = iu.image_input(input_tensor, input_shape, where)
    kernel, activation, se_ratio = (3, relu, None) if minimalistic else (5, hard_swish, 0.25)
    x = img_input
    if include_preprocessing:
        x = layers.Rescaling(scale=1.0 / 127.5, offset=-1.0)(x)
    x = layers.Conv2D(16, kernel_size=3, strides=(2, 2), padding="same", use_bias=False,
                      name="conv")(x)
    x = layers.BatchNormalization(**_BN, name="conv_bn")(x)
    x = activation(x)
    for block_id, (expansion, filters, k, stride, se, act) in enumerate(blocks):
        x = _inverted_res_block(x, expansion, _depth(filters * alpha, 8),
                                kernel if k == "k" else k, stride, se_ratio if se else None,
                                activation if act == "act" else relu, block_id)
    last_conv_ch = _depth(x.shape[-1] * 6, 8)
    if alpha > 1.0:
        last_point_ch = _depth(last_point_ch * alpha, 8)
    x = layers.Conv2D(last_conv_ch, kernel_size=1, padding="same", use_bias=False,
                      name="conv_1")(x)
    x = layers.BatchNormalization(**_BN, name="conv_1_bn")(x)
    x = activation(x)
    if include_top:
        x = layers.GlobalAveragePooling2D(keepdims=True)(x)
        x = layers.Conv2D(last_point_ch, kernel_size=1, padding="same", use_bias=True,
                          name="conv_2")(x)
        x = activation(x)
        if dropout_rate > 0:
            x = layers.Dropout(dropout_rate)(x)
        x = layers.Conv2D(classes, kernel_size=1, padding="same", name="logits")(x)
        x = layers.Flatten()(x)
        iu.validate_activation(classifier_activation, weights, where)
        x = layers.Activation(activation=classifier_activation, name="predictions")(x)
    else:
        x = iu.pooled(x, pooling)
    model_name = f"{model_type}{'_minimalistic' if minimalistic else ''}_224_{alpha}_float"
    fname = f"weights_mobilenet_v3_{model_name}{'' if include_top else '_no_top_v2'}.h5"
    return iu.finish(img_input, input_tensor, x, name, weights, (fname, WEIGHTS_URL + fname),
                     where)


_DOC = """Instantiates the {0} architecture (Keras' ``keras.applications.{0}``).

    Args:
        input_shape: (H, W, 3) with H, W >= 32 or None (any size).
        alpha: width multiplier (ImageNet weights: 0.75 or 1.0; 1.0 when minimalistic).
        minimalistic: 3x3 kernels, ReLU and no squeeze-and-excite.
        include_top, weights, input_tensor, classes, pooling, classifier_activation: as in
            ``ResNet50``.
        dropout_rate: before the classifier.
        include_preprocessing: rescale [0, 255] inputs to [-1, 1] inside the model.
        name: the model's name.

    Returns:
        A functional ``kiln.Model``.
    """


def MobileNetV3Small(input_shape: Any = None, alpha: float = 1.0,  # noqa: N802
                     minimalistic: bool = False, include_top: bool = True,
                     weights: Any = "imagenet", input_tensor: Any = None, classes: int = 1000,
                     pooling: str | None = None, dropout_rate: float = 0.2,
                     classifier_activation: Any = "softmax", include_preprocessing: bool = True,
                     name: str = "MobileNetV3Small") -> Any:
    return MobileNetV3(_SMALL, 1024, input_shape, alpha, "small", minimalistic, include_top,
                       weights, input_tensor, classes, pooling, dropout_rate,
                       classifier_activation, include_preprocessing, name)


def MobileNetV3Large(input_shape: Any = None, alpha: float = 1.0,  # noqa: N802
                     minimalistic: bool = False, include_top: bool = True,
                     weights: Any = "imagenet", input_tensor: Any = None, classes: int = 1000,
                     pooling: str | None = None, dropout_rate: float = 0.2,
                     classifier_activation: Any = "softmax", include_preprocessing: bool = True,
                     name: str = "MobileNetV3Large") -> Any:
    return MobileNetV3(_LARGE, 1280, input_shape, alpha, "large", minimalistic, include_top,
                       weights, input_tensor, classes, pooling, dropout_rate,
                       classifier_activation, include_preprocessing, name)


MobileNetV3Small.__doc__ = _DOC.format("MobileNetV3Small")
MobileNetV3Large.__doc__ = _DOC.format("MobileNetV3Large")


def preprocess_input(x: Any, data_format: str | None = None) -> Any:
    """The identity: MobileNetV3 rescales its input itself (``include_preprocessing``)."""
    return x


decode_predictions = iu.decode_predictions
