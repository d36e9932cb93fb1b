"""InceptionResNetV2 ("Inception-v4, Inception-ResNet and the Impact of Residual Connections
on Learning", AAAI 2017), as Keras 3.15's ``keras.applications.inception_resnet_v2`` builds
it, with Keras' layer names (many of its layers are unnamed in Keras too; they are created in
Keras' order, so Keras' weight files load).

Example:
    >>> kiln.applications.InceptionResNetV2(weights=None).count_params()
    55873736
"""

from __future__ import annotations

from typing import Any

from kiln import layers
from kiln.applications import imagenet_utils as iu
from kiln.registry import register_builtin

WEIGHTS_URL = ("https://storage.googleapis.com/tensorflow/keras-applications/"
               "inception_resnet_v2/")


def conv2d_bn(x: Any, filters: int, kernel_size: Any, strides: int = 1, padding: str = "same",
              activation: Any = "relu", use_bias: bool = False, name: str | None = None) -> Any:
    """Conv, then (without a bias) batch norm without scale, then the activation."""
    x = layers.Conv2D(filters, kernel_size, strides=strides, padding=padding, use_bias=use_bias,
                      name=name)(x)
    if not use_bias:
        x = layers.BatchNormalization(axis=3, scale=False,
                                      name=None if name is None else f"{name}_bn")(x)
    if activation is not None:
        x = layers.Activation(activation, name=None if name is None else f"{name}_ac")(x)
    return x


class CustomScaleLayer(layers.Layer):
    """``inputs[0] + inputs[1] * scale``: the scaled residual (Keras'
    ``inception_resnet_v2.CustomScaleLayer``)."""

    def __init__(self, scale: float, **kwargs: Any):
        super().__init__(**kwargs)
        self.scale = scale

    def call(self, inputs: Any) -> Any:
        return inputs[0] + inputs[1] * self.scale

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape[0]

    def get_config(self) -> dict:
        return {**super().get_config(), "scale": self.scale}


register_builtin("CustomScaleLayer", CustomScaleLayer)

#: per block type: branches, each a list of (filters, kernel) convolutions
_BLOCKS = {
    "block35": [[(32, 1)], [(32, 1), (32, 3)], [(32, 1), (48, 3), (64, 3)]],
    "block17": [[(192, 1)], [(128, 1), (160, [1, 7]), (192, [7, 1])]],
    "block8": [[(192, 1)], [(192, 1), (224, [1, 3]), (256, [3, 1])]],
}


def inception_resnet_block(x: Any, scale: float, block_type: str, block_idx: int,
                           activation: Any = "relu") -> Any:
    """An Inception-ResNet block ("block35", "block17" or "block8"): its branches,
    concatenated, projected back by a 1x1 conv and added to ``x`` scaled by ``scale``."""
    if block_type not in _BLOCKS:
        raise ValueError('Unknown Inception-ResNet block type: expects "block35", "block17" or '
                         f'"block8", received {block_type!r}')
    branches = []
    for convs in _BLOCKS[block_type]:
        b = x
        for filters, kernel in convs:
            b = conv2d_bn(b, filters, kernel)
        branches.append(b)
    block_name = f"{block_type}_{block_idx}"
    mixed = layers.Concatenate(axis=3, name=f"{block_name}_mixed")(branches)
    up = conv2d_bn(mixed, x.shape[3], 1, activation=None, use_bias=True,
                   name=f"{block_name}_conv")
    x = CustomScaleLayer(scale)([x, up])
    if activation is not None:
        x = layers.Activation(activation, name=f"{block_name}_ac")(x)
    return x


def InceptionResNetV2(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
                      input_tensor: Any = None, input_shape: Any = None,
                      pooling: str | None = None, classes: int = 1000,
                      classifier_activation: Any = "softmax",
                      name: str = "inception_resnet_v2") -> Any:
    """Instantiates the InceptionResNetV2 architecture (Keras'
    ``keras.applications.InceptionResNetV2``).

    Args:
        include_top, weights, input_tensor, input_shape, pooling, classes,
        classifier_activation, name: as in ``ResNet50``; the default input is 299x299 and
            the smallest 75x75.

    Returns:
        A functional ``kiln.Model``; inputs go through
        ``inception_resnet_v2.preprocess_input`` (tf).
    """
    where = name
    iu.check_weights(weights, include_top, classes, where)
    input_shape = iu.obtain_input_shape(input_shape, 299, 75, None, include_top, weights,
                                        where)
    img_input = iu.image_input(input_tensor, input_shape, where)
    x = conv2d_bn(img_input, 32, 3, strides=2, padding="valid")
    x = conv2d_bn(x, 32, 3, padding="valid")
    x = conv2d_bn(x, 64, 3)
    x = layers.MaxPooling2D(3, strides=2)(x)
    x = conv2d_bn(x, 80, 1, padding="valid")
    x = conv2d_bn(x, 192, 3, padding="valid")
    x = layers.MaxPooling2D(3, strides=2)(x)
    # mixed 5b (Inception-A block): 35 x 35 x 320
    branch_0 = conv2d_bn(x, 96, 1)
    branch_1 = conv2d_bn(conv2d_bn(x, 48, 1), 64, 5)
    branch_2 = conv2d_bn(conv2d_bn(conv2d_bn(x, 64, 1), 96, 3), 96, 3)
    branch_pool = conv2d_bn(layers.AveragePooling2D(3, strides=1, padding="same")(x), 64, 1)
    x = layers.Concatenate(axis=3, name="mixed_5b")([branch_0, branch_1, branch_2,
                                                     branch_pool])
    for block_idx in range(1, 11):
        x = inception_resnet_block(x, scale=0.17, block_type="block35", block_idx=block_idx)
    # mixed 6a (Reduction-A block): 17 x 17 x 1088
    branch_0 = conv2d_bn(x, 384, 3, strides=2, padding="valid")
    branch_1 = conv2d_bn(conv2d_bn(conv2d_bn(x, 256, 1), 256, 3), 384, 3, strides=2,
                         padding="valid")
    branch_pool = layers.MaxPooling2D(3, strides=2, padding="valid")(x)
    x = layers.Concatenate(axis=3, name="mixed_6a")([branch_0, branch_1, branch_pool])
    for block_idx in range(1, 21):
        x = inception_resnet_block(x, scale=0.1, block_type="block17", block_idx=block_idx)
    # mixed 7a (Reduction-B block): 8 x 8 x 2080
    branch_0 = conv2d_bn(conv2d_bn(x, 256, 1), 384, 3, strides=2, padding="valid")
    branch_1 = conv2d_bn(conv2d_bn(x, 256, 1), 288, 3, strides=2, padding="valid")
    branch_2 = conv2d_bn(conv2d_bn(conv2d_bn(x, 256, 1), 288, 3), 320, 3, strides=2,
                         padding="valid")
    branch_pool = layers.MaxPooling2D(3, strides=2, padding="valid")(x)
    x = layers.Concatenate(axis=3, name="mixed_7a")([branch_0, branch_1, branch_2,
                                                     branch_pool])
    for block_idx in range(1, 10):
        x = inception_resnet_block(x, scale=0.2, block_type="block8", block_idx=block_idx)
    x = inception_resnet_block(x, scale=1.0, activation=None, block_type="block8",
                               block_idx=10)
    x = conv2d_bn(x, 1536, 1, name="conv_7b")
    if include_top:
        x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
        iu.validate_activation(classifier_activation, weights, where)
        x = layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    else:
        x = iu.pooled(x, pooling, None, None)
    top = "" if include_top else "_notop"
    fname = f"inception_resnet_v2_weights_tf_dim_ordering_tf_kernels{top}.h5"
    return iu.finish(img_input, input_tensor, x, name, weights, (fname, WEIGHTS_URL + fname),
                     where)


def preprocess_input(x: Any, data_format: str | None = None) -> Any:
    """InceptionResNetV2's preprocessing: tf mode (pixels scaled to [-1, 1])."""
    return iu.preprocess_input(x, data_format=data_format, mode="tf")


decode_predictions = iu.decode_predictions
