"""NASNetMobile and NASNetLarge ("Learning Transferable Architectures for Scalable Image
Recognition", CVPR 2018), as Keras 3.15's ``keras.applications.nasnet`` builds them, with
Keras' layer names (its unnamed layers are created in Keras' order).

Example:
    >>> kiln.applications.NASNetMobile(weights=None).count_params()
    5326716
"""

from __future__ import annotations

from typing import Any

from kiln import layers
from kiln.applications import imagenet_utils as iu

WEIGHTS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/nasnet/"
_BN = {"axis": -1, "momentum": 0.9997, "epsilon": 1e-3}


def _separable_conv_block(ip: Any, filters: int, kernel_size: Any = (3, 3),
                          strides: Any = (1, 1), block_id: str = "") -> Any:
    """ReLU, separable conv (strided: padded as TensorFlow does), BN, ReLU, separable conv,
    BN."""
    x = layers.Activation("relu")(ip)
    if strides == (2, 2):
        x = layers.ZeroPadding2D(padding=iu.correct_pad(x, kernel_size),
                                 name=f"separable_conv_1_pad_{block_id}")(x)
    x = layers.SeparableConv2D(filters, kernel_size, strides=strides,
                               name=f"separable_conv_1_{block_id}",
                               padding="valid" if strides == (2, 2) else "same",
                               use_bias=False)(x)
    x = layers.BatchNormalization(**_BN, name=f"separable_conv_1_bn_{block_id}")(x)
    x = layers.Activation("relu")(x)
    x = layers.SeparableConv2D(filters, kernel_size, name=f"separable_conv_2_{block_id}",
                               padding="same", use_bias=False)(x)
    return layers.BatchNormalization(**_BN, name=f"separable_conv_2_bn_{block_id}")(x)


def _conv1x1(x: Any, filters: int, name: str) -> Any:
    return layers.Conv2D(filters, (1, 1), padding="same", use_bias=False, name=name,
                         kernel_initializer="he_normal")(x)


def _adjust_block(p: Any, ip: Any, filters: int, block_id: str = "") -> Any:
    """Matches the previous cell's output ``p`` to ``ip``: halved (two offset paths) when
    its size differs, projected when its channels differ."""
    if p is None:
        return ip
    if p.shape[-2] != ip.shape[-2]:
        p = layers.Activation("relu", name=f"adjust_relu_1_{block_id}")(p)
        p1 = layers.AveragePooling2D((1, 1), strides=(2, 2), padding="valid",
                                     name=f"adjust_avg_pool_1_{block_id}")(p)
        p1 = _conv1x1(p1, filters // 2, f"adjust_conv_1_{block_id}")
        p2 = layers.ZeroPadding2D(padding=((0, 1), (0, 1)))(p)
        p2 = layers.Cropping2D(cropping=((1, 0), (1, 0)))(p2)
        p2 = layers.AveragePooling2D((1, 1), strides=(2, 2), padding="valid",
                                     name=f"adjust_avg_pool_2_{block_id}")(p2)
        p2 = _conv1x1(p2, filters // 2, f"adjust_conv_2_{block_id}")
        p = layers.concatenate([p1, p2], axis=-1)
        return layers.BatchNormalization(**_BN, name=f"adjust_bn_{block_id}")(p)
    if p.shape[-1] != filters:
        p = layers.Activation("relu")(p)
        p = _conv1x1(p, filters, f"adjust_conv_projection_{block_id}")
        return layers.BatchNormalization(**_BN, name=f"adjust_bn_{block_id}")(p)
    return p


def _squeeze(ip: Any, filters: int, kind: str, block_id: str) -> Any:
    h = layers.Activation("relu")(ip)
    h = _conv1x1(h, filters, f"{kind}_conv_1_{block_id}")
    return layers.BatchNormalization(**_BN, name=f"{kind}_bn_1_{block_id}")(h)


def _normal_a_cell(ip: Any, p: Any, filters: int, block_id: str = "") -> tuple[Any, Any]:
    p = _adjust_block(p, ip, filters, block_id)
    h = _squeeze(ip, filters, "normal", block_id)
    b = f"normal_{{}}_{block_id}"
    x1 = layers.add([_separable_conv_block(h, filters, (5, 5), block_id=b.format("left1")),
                     _separable_conv_block(p, filters, block_id=b.format("right1"))],
                    name=b.format("add_1"))
    x2 = layers.add([_separable_conv_block(p, filters, (5, 5), block_id=b.format("left2")),
                     _separable_conv_block(p, filters, (3, 3), block_id=b.format("right2"))],
                    name=b.format("add_2"))
    x3 = layers.AveragePooling2D((3, 3), strides=(1, 1), padding="same",
                                 name=b.format("left3"))(h)
    x3 = layers.add([x3, p], name=b.format("add_3"))
    x4_1 = layers.AveragePooling2D((3, 3), strides=(1, 1), padding="same",
                                   name=b.format("left4"))(p)
    x4_2 = layers.AveragePooling2D((3, 3), strides=(1, 1), padding="same",
                                   name=b.format("right4"))(p)
    x4 = layers.add([x4_1, x4_2], name=b.format("add_4"))
    x5 = _separable_conv_block(h, filters, block_id=b.format("left5"))
    x5 = layers.add([x5, h], name=b.format("add_5"))
    x = layers.concatenate([p, x1, x2, x3, x4, x5], axis=-1, name=b.format("concat"))
    return x, ip


def _reduction_a_cell(ip: Any, p: Any, filters: int, block_id: str = "") -> tuple[Any, Any]:
    p = _adjust_block(p, ip, filters, block_id)
    h = _squeeze(ip, filters, "reduction", block_id)
    h3 = layers.ZeroPadding2D(padding=iu.correct_pad(h, 3), name=f"reduction_pad_1_{block_id}")(h)
    b = f"reduction_{{}}_{block_id}"
    s2 = (2, 2)
    x1 = layers.add([
        _separable_conv_block(h, filters, (5, 5), strides=s2, block_id=b.format("left1")),
        _separable_conv_block(p, filters, (7, 7), strides=s2, block_id=b.format("right1"))],
        name=b.format("add_1"))
    x2_1 = layers.MaxPooling2D((3, 3), strides=s2, padding="valid", name=b.format("left2"))(h3)
    x2_2 = _separable_conv_block(p, filters, (7, 7), strides=s2, block_id=b.format("right2"))
    x2 = layers.add([x2_1, x2_2], name=b.format("add_2"))
    x3_1 = layers.AveragePooling2D((3, 3), strides=s2, padding="valid",
                                   name=b.format("left3"))(h3)
    x3_2 = _separable_conv_block(p, filters, (5, 5), strides=s2, block_id=b.format("right3"))
    x3 = layers.add([x3_1, x3_2], name=b.format("add3"))
    x4 = layers.AveragePooling2D((3, 3), strides=(1, 1), padding="same",
                                 name=b.format("left4"))(x1)
    x4 = layers.add([x2, x4])
    x5_1 = _separable_conv_block(x1, filters, (3, 3), block_id=b.format("left4"))
    x5_2 = layers.MaxPooling2D((3, 3), strides=s2, padding="valid", name=b.format("right5"))(h3)
    x5 = layers.add([x5_1, x5_2], name=b.format("add4"))
    x = layers.concatenate([x2, x3, x4, x5], axis=-1, name=b.format("concat"))
    return x, ip


def NASNet(input_shape: Any = None, penultimate_filters: int = 4032,  # noqa: N802
           num_blocks: int = 6, stem_block_filters: int = 96, skip_reduction: bool = True,
           filter_multiplier: int = 2, include_top: bool = True, weights: Any = "imagenet",
           input_tensor: Any = None, pooling: str | None = None, classes: int = 1000,
           default_size: int | None = None, classifier_activation: Any = "softmax",
           name: str = "NASNet") -> Any:
    """A NASNet-A: a stem, two reduction cells, then three stacks of ``num_blocks`` normal
    cells separated by reduction cells; ``penultimate_filters`` sets the width."""
    where = name
    iu.check_weights(weights, include_top, classes, where)
    if isinstance(input_shape, tuple) and None in input_shape and weights == "imagenet":
        raise ValueError(f"{where}: with ImageNet weights input_shape must be static (no None "
                         f"entries); received input_shape={input_shape}")
    default_size = 331 if default_size is None else default_size
    input_shape = iu.obtain_input_shape(input_shape, default_size, 32, None, include_top,
                                        weights, where)
    img_input = iu.image_input(input_tensor, input_shape, where)
    if penultimate_filters % (24 * filter_multiplier**2) != 0:
        raise ValueError(f"{where}: penultimate_filters must be a multiple of 24 * "
                         f"filter_multiplier ** 2; received {penultimate_filters}")
    filters = penultimate_filters // 24
    x = layers.Conv2D(stem_block_filters, (3, 3), strides=(2, 2), padding="valid",
                      use_bias=False, name="stem_conv1", kernel_initializer="he_normal")(
        img_input)
    x = layers.BatchNormalization(**_BN, name="stem_bn1")(x)
    p = None
    x, p = _reduction_a_cell(x, p, filters // filter_multiplier**2, block_id="stem_1")
    x, p = _reduction_a_cell(x, p, filters // filter_multiplier, block_id="stem_2")
    for stack in range(3):
        width = filters * filter_multiplier**stack
        if stack:
            x, p0 = _reduction_a_cell(x, p, width, block_id=f"reduce_{stack * num_blocks}")
            p = p if skip_reduction else p0
        for i in range(num_blocks):
            x, p = _normal_a_cell(x, p, width,
                                  block_id=f"{stack * num_blocks + i + (1 if stack else 0)}")
    x = layers.Activation("relu")(x)
    if include_top:
        x = layers.GlobalAveragePooling2D()(x)
        iu.validate_activation(classifier_activation, weights, where)
        x = layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    else:
        x = iu.pooled(x, pooling, None, None)
    file = None
    if default_size in (224, 331):
        kind = "mobile" if default_size == 224 else "large"
        fname = f"nasnet_{kind}{'' if include_top else '_no_top'}.h5"
        file = (fname, f"{WEIGHTS_URL}NASNet-{kind}{'' if include_top else '-no-top'}.h5")
    elif weights == "imagenet":
        raise ValueError(f"{where}: ImageNet weights can only be loaded with NASNetLarge or "
                         "NASNetMobile")
    return iu.finish(img_input, input_tensor, x, name, weights, file, where)


def NASNetMobile(input_shape: Any = None, include_top: bool = True,  # noqa: N802
                 weights: Any = "imagenet", input_tensor: Any = None,
                 pooling: str | None = None, classes: int = 1000,
                 classifier_activation: Any = "softmax", name: str = "nasnet_mobile") -> Any:
    """Instantiates NASNetMobile (Keras' ``keras.applications.NASNetMobile``; 224x224).

    Args:
        input_shape, include_top, weights, input_tensor, pooling, classes,
        classifier_activation, name: as in ``ResNet50`` (without the top and a shape, the
            input is 224x224).

    Returns:
        A functional ``kiln.Model``; inputs go through ``nasnet.preprocess_input`` (tf).
    """
    if not include_top and input_shape is None:
        input_shape = (224, 224, 3)
    return NASNet(input_shape, penultimate_filters=1056, num_blocks=4, stem_block_filters=32,
                  skip_reduction=False, filter_multiplier=2, include_top=include_top,
                  weights=weights, input_tensor=input_tensor, pooling=pooling, classes=classes,
                  default_size=224, classifier_activation=classifier_activation, name=name)


def NASNetLarge(input_shape: Any = None, include_top: bool = True,  # noqa: N802
                weights: Any = "imagenet", input_tensor: Any = None,
                pooling: str | None = None, classes: int = 1000,
                classifier_activation: Any = "softmax", name: str = "nasnet_large") -> Any:
    """Instantiates NASNetLarge (Keras' ``keras.applications.NASNetLarge``; 331x331);
    arguments as in :func:`NASNetMobile`."""
    return NASNet(input_shape, penultimate_filters=4032, num_blocks=6, stem_block_filters=96,
                  skip_reduction=True, filter_multiplier=2, include_top=include_top,
                  weights=weights, input_tensor=input_tensor, pooling=pooling, classes=classes,
                  default_size=331, classifier_activation=classifier_activation, name=name)


def preprocess_input(x: Any, data_format: str | None = None) -> Any:
    """NASNet's preprocessing: tf mode (pixels scaled to [-1, 1])."""
    return iu.preprocess_input(x, data_format=data_format, mode="tf")


decode_predictions = iu.decode_predictions
