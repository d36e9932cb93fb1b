"""EfficientNetB0 ... B7 ("EfficientNet: Rethinking Model Scaling for Convolutional Neural
Networks", ICML 2019), as Keras 3.15's ``keras.applications.efficientnet`` builds them, with
Keras' layer names. The models rescale and normalize their input themselves (they take pixels
in [0, 255]); ``preprocess_input`` is the identity.

Example:
    >>> kiln.applications.EfficientNetB0(weights=None).count_params()
    5330571
"""

from __future__ import annotations

import math
from typing import Any

from kiln import initializers, layers
from kiln.applications import imagenet_utils as iu

WEIGHTS_URL = "https://storage.googleapis.com/keras-applications/"
IMAGENET_STDDEV_RGB = [0.229, 0.224, 0.225]

#: (kernel_size, repeats, filters_in, filters_out, expand_ratio, strides) per stage; every
#: block has id_skip and se_ratio 0.25
DEFAULT_BLOCKS_ARGS = [(3, 1, 32, 16, 1, 1), (3, 2, 16, 24, 6, 2), (5, 2, 24, 40, 6, 2),
                       (3, 3, 40, 80, 6, 2), (5, 3, 80, 112, 6, 1), (5, 4, 112, 192, 6, 2),
                       (3, 1, 192, 320, 6, 1)]


def conv_init() -> Any:
    return initializers.VarianceScaling(scale=2.0, mode="fan_out",
                                        distribution="truncated_normal")


def dense_init() -> Any:
    return initializers.VarianceScaling(scale=1.0 / 3.0, mode="fan_out", distribution="uniform")


def block(inputs: Any, activation: Any = "swish", drop_rate: float = 0.0, name: str = "",
          filters_in: int = 32, filters_out: int = 16, kernel_size: int = 3, strides: int = 1,
          expand_ratio: int = 1, se_ratio: float = 0.0, id_skip: bool = True) -> Any:
    """The mobile inverted bottleneck block with squeeze-and-excite."""
    filters = filters_in * expand_ratio
    if expand_ratio != 1:
        x = layers.Conv2D(filters, 1, padding="same", use_bias=False,
                          kernel_initializer=conv_init(), name=f"{name}expand_conv")(inputs)
        x = layers.BatchNormalization(axis=3, name=f"{name}expand_bn")(x)
        x = layers.Activation(activation, name=f"{name}expand_activation")(x)
    else:
        x = inputs
    if strides == 2:
        x = layers.ZeroPadding2D(padding=iu.correct_pad(x, kernel_size),
                                 name=f"{name}dwconv_pad")(x)
    x = layers.DepthwiseConv2D(kernel_size, strides=strides,
                               padding="valid" if strides == 2 else "same", use_bias=False,
                               depthwise_initializer=conv_init(), name=f"{name}dwconv")(x)
    x = layers.BatchNormalization(axis=3, name=f"{name}bn")(x)
    x = layers.Activation(activation, name=f"{name}activation")(x)
    if 0 < se_ratio <= 1:
        filters_se = max(1, int(filters_in * se_ratio))
        se = layers.GlobalAveragePooling2D(name=f"{name}se_squeeze")(x)
        se = layers.Reshape((1, 1, filters), name=f"{name}se_reshape")(se)
        se = layers.Conv2D(filters_se, 1, padding="same", activation=activation,
                           kernel_initializer=conv_init(), name=f"{name}se_reduce")(se)
        se = layers.Conv2D(filters, 1, padding="same", activation="sigmoid",
                           kernel_initializer=conv_init(), name=f"{name}se_expand")(se)
        x = layers.multiply([x, se], name=f"{name}se_excite")
    x = layers.Conv2D(filters_out, 1, padding="same", use_bias=False,
                      kernel_initializer=conv_init(), name=f"{name}project_conv")(x)
    x = layers.BatchNormalization(axis=3, name=f"{name}project_bn")(x)
    if id_skip and strides == 1 and filters_in == filters_out:
        if drop_rate > 0:
            x = layers.Dropout(drop_rate, noise_shape=(None, 1, 1, 1), name=f"{name}drop")(x)
        x = layers.add([x, inputs], name=f"{name}add")
    return x


def EfficientNet(width_coefficient: float, depth_coefficient: float,  # noqa: N802
                 default_size: int, dropout_rate: float = 0.2, drop_connect_rate: float = 0.2,
                 depth_divisor: int = 8, activation: Any = "swish",
                 blocks_args: Any = "default", name: str = "efficientnet",
                 include_top: bool = True, weights: Any = "imagenet", input_tensor: Any = None,
                 input_shape: Any = None, pooling: str | None = None, classes: int = 1000,
                 classifier_activation: Any = "softmax", weights_name: str | None = None) -> Any:
    """The EfficientNet body, scaled by width and depth coefficients.

    ``blocks_args`` is "default" or a list of Keras' block dicts (kernel_size, repeats,
    filters_in, filters_out, expand_ratio, id_skip, strides, se_ratio)."""
    if blocks_args == "default":
        blocks_args = [{"kernel_size": k, "repeats": r, "filters_in": fi, "filters_out": fo,
                        "expand_ratio": e, "id_skip": True, "strides": s, "se_ratio": 0.25}
                       for k, r, fi, fo, e, s in DEFAULT_BLOCKS_ARGS]
    where = name
    iu.check_weights(weights, include_top, classes, where)
    input_shape = iu.obtain_input_shape(input_shape, default_size, 32, None, include_top,
                                        weights, where)
    img_input = iu.image_input(input_tensor, input_shape, where)

    def round_filters(filters: float, divisor: int = depth_divisor) -> int:
        filters *= width_coefficient
        new = max(divisor, int(filters + divisor / 2) // divisor * divisor)
        return int(new + divisor if new < 0.9 * filters else new)

    def round_repeats(repeats: int) -> int:
        return int(math.ceil(depth_coefficient * repeats))

    x = layers.Rescaling(1.0 / 255.0)(img_input)
    x = layers.Normalization(axis=3)(x)
    if weights == "imagenet":
        x = layers.Rescaling([1.0 / math.sqrt(s) for s in IMAGENET_STDDEV_RGB])(x)
    x = layers.ZeroPadding2D(padding=iu.correct_pad(x, 3), name="stem_conv_pad")(x)
    x = layers.Conv2D(round_filters(32), 3, strides=2, padding="valid", use_bias=False,
                      kernel_initializer=conv_init(), name="stem_conv")(x)
    x = layers.BatchNormalization(axis=3, name="stem_bn")(x)
    x = layers.Activation(activation, name="stem_activation")(x)
    b = 0
    total = float(sum(round_repeats(a["repeats"]) for a in blocks_args))
    for i, stage in enumerate(blocks_args):
        args = dict(stage)
        if args["repeats"] <= 0:
            raise ValueError(f"{where}: the number of repeats must be > 0; received "
                             f"repeats={args['repeats']}")
        args["filters_in"] = round_filters(args["filters_in"])
        args["filters_out"] = round_filters(args["filters_out"])
        for j in range(round_repeats(args.pop("repeats"))):
            if j > 0:
                args["strides"] = 1
                args["filters_in"] = args["filters_out"]
            x = block(x, activation, drop_connect_rate * b / total,
                      name=f"block{i + 1}{chr(j + 97)}_", **args)
            b += 1
    x = layers.Conv2D(round_filters(1280), 1, padding="same", use_bias=False,
                      kernel_initializer=conv_init(), name="top_conv")(x)
    x = layers.BatchNormalization(axis=3, name="top_bn")(x)
    x = layers.Activation(activation, name="top_activation")(x)
    if include_top:
        x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
        if dropout_rate > 0:
            x = layers.Dropout(dropout_rate, name="top_dropout")(x)
        iu.validate_activation(classifier_activation, weights, where)
        x = layers.Dense(classes, activation=classifier_activation,
                         kernel_initializer=dense_init(), name="predictions")(x)
    else:
        x = iu.pooled(x, pooling)
    fname = name + (".h5" if include_top else "_notop.h5")
    return iu.finish(img_input, input_tensor, x, name, weights,
                     (fname, WEIGHTS_URL + fname) if weights_name else None, where)


#: width, depth, default size, dropout per variant
_SCALES = {"b0": (1.0, 1.0, 224, 0.2), "b1": (1.0, 1.1, 240, 0.2), "b2": (1.1, 1.2, 260, 0.3),
           "b3": (1.2, 1.4, 300, 0.3), "b4": (1.4, 1.8, 380, 0.4), "b5": (1.6, 2.2, 456, 0.4),
           "b6": (1.8, 2.6, 528, 0.5), "b7": (2.0, 3.1, 600, 0.5)}


def _variant(key: str, include_top: bool, weights: Any, input_tensor: Any, input_shape: Any,
             pooling: str | None, classes: int, classifier_activation: Any, name: str) -> Any:
    width, depth, size, dropout = _SCALES[key]
    return EfficientNet(width, depth, size, dropout, name=name, include_top=include_top,
                        weights=weights, input_tensor=input_tensor, input_shape=input_shape,
                        pooling=pooling, classes=classes,
                        classifier_activation=classifier_activation, weights_name=key)


_DOC = """Instantiates the EfficientNet{0} architecture (Keras'
    ``keras.applications.EfficientNet{0}``; default input {1}x{1}).

    Args:
        include_top, weights, input_tensor, input_shape, pooling, classes,
        classifier_activation, name: as in ``ResNet50`` (inputs are pixels in [0, 255]: the
            model rescales them).

    Returns:
        A functional ``kiln.Model``.
    """


def _make(key: str) -> Any:
    def fn(include_top: bool = True, weights: Any = "imagenet", input_tensor: Any = None,
           input_shape: Any = None, pooling: str | None = None, classes: int = 1000,
           classifier_activation: Any = "softmax", name: str = f"efficientnet{key}") -> Any:
        return _variant(key, include_top, weights, input_tensor, input_shape, pooling,
                        classes, classifier_activation, name)

    fn.__name__ = fn.__qualname__ = f"EfficientNet{key.upper()}"
    fn.__doc__ = _DOC.format(key.upper(), _SCALES[key][2])
    return fn


EfficientNetB0 = _make("b0")
EfficientNetB1 = _make("b1")
EfficientNetB2 = _make("b2")
EfficientNetB3 = _make("b3")
EfficientNetB4 = _make("b4")
EfficientNetB5 = _make("b5")
EfficientNetB6 = _make("b6")
EfficientNetB7 = _make("b7")


def preprocess_input(x: Any, data_format: str | None = None) -> Any:
    """The identity: EfficientNet rescales and normalizes its input itself."""
    return x


decode_predictions = iu.decode_predictions
