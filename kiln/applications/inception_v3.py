"""InceptionV3 ("Rethinking the Inception Architecture for Computer Vision", CVPR 2016), as
Keras 3.15's ``keras.applications.inception_v3`` builds it. Its convolutions are unnamed in
Keras too; they are created in Keras' order, so Keras' weight files (keyed by class and
position) load.

Example:
    >>> kiln.applications.InceptionV3(weights=None).count_params()
    23851784
"""

from __future__ import annotations

from typing import Any

from kiln import layers
from kiln.applications import imagenet_utils as iu

WEIGHTS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/inception_v3/"


def conv2d_bn(x: Any, filters: int, num_row: int, num_col: int, padding: str = "same",
              strides: Any = (1, 1), name: str | None = None) -> Any:
    """Conv (no bias), batch norm (no scale), ReLU."""
    x = layers.Conv2D(filters, (num_row, num_col), strides=strides, padding=padding,
                      use_bias=False, name=None if name is None else f"{name}_conv")(x)
    x = layers.BatchNormalization(axis=3, scale=False,
                                  name=None if name is None else f"{name}_bn")(x)
    return layers.Activation("relu", name=name)(x)


def _chain(x: Any, convs: list[tuple]) -> Any:
    """conv2d_bn applied in turn: each entry (filters, rows, cols[, strides, padding])."""
    for filters, rows, cols, *rest in convs:
        strides, padding = rest if rest else ((1, 1), "same")
        x = conv2d_bn(x, filters, rows, cols, padding=padding, strides=strides)
    return x


def _pool_branch(x: Any, filters: int) -> Any:
    x = layers.AveragePooling2D((3, 3), strides=(1, 1), padding="same")(x)
    return conv2d_bn(x, filters, 1, 1)


_S2 = ((2, 2), "valid")


def InceptionV3(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
                input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
                classes: int = 1000, classifier_activation: Any = "softmax",
                name: str = "inception_v3") -> Any:
    """Instantiates the InceptionV3 architecture (Keras' ``keras.applications.InceptionV3``).

    Args:
        include_top, weights, input_tensor, input_shape, pooling, classes,
        classifier_activation, name: as in ``ResNet50``; the default input is 299x299 and
            the smallest 75x75.

    Returns:
        A functional ``kiln.Model``; inputs go through ``inception_v3.preprocess_input`` (tf).
    """
    where = name
    iu.check_weights(weights, include_top, classes, where)
    input_shape = iu.obtain_input_shape(input_shape, 299, 75, None, include_top, weights,
                                        where)
    img_input = iu.image_input(input_tensor, input_shape, where)
    x = _chain(img_input, [(32, 3, 3, *_S2), (32, 3, 3, (1, 1), "valid"), (64, 3, 3)])
    x = layers.MaxPooling2D((3, 3), strides=(2, 2))(x)
    x = _chain(x, [(80, 1, 1, (1, 1), "valid"), (192, 3, 3, (1, 1), "valid")])
    x = layers.MaxPooling2D((3, 3), strides=(2, 2))(x)
    # mixed 0, 1, 2: 35 x 35 x 256 / 288
    for i, pool_filters in enumerate((32, 64, 64)):
        branches = [_chain(x, [(64, 1, 1)]), _chain(x, [(48, 1, 1), (64, 5, 5)]),
                    _chain(x, [(64, 1, 1), (96, 3, 3), (96, 3, 3)]),
                    _pool_branch(x, pool_filters)]
        x = layers.concatenate(branches, axis=3, name=f"mixed{i}")
    # mixed 3: 17 x 17 x 768
    branches = [_chain(x, [(384, 3, 3, *_S2)]),
                _chain(x, [(64, 1, 1), (96, 3, 3), (96, 3, 3, *_S2)]),
                layers.MaxPooling2D((3, 3), strides=(2, 2))(x)]
    x = layers.concatenate(branches, axis=3, name="mixed3")
    # mixed 4..7: 17 x 17 x 768
    for i, c in enumerate((128, 160, 160, 192)):
        branches = [_chain(x, [(192, 1, 1)]), _chain(x, [(c, 1, 1), (c, 1, 7), (192, 7, 1)]),
                    _chain(x, [(c, 1, 1), (c, 7, 1), (c, 1, 7), (c, 7, 1), (192, 1, 7)]),
                    _pool_branch(x, 192)]
        x = layers.concatenate(branches, axis=3, name=f"mixed{4 + i}")
    # mixed 8: 8 x 8 x 1280
    branches = [_chain(x, [(192, 1, 1), (320, 3, 3, *_S2)]),
                _chain(x, [(192, 1, 1), (192, 1, 7), (192, 7, 1), (192, 3, 3, *_S2)]),
                layers.MaxPooling2D((3, 3), strides=(2, 2))(x)]
    x = layers.concatenate(branches, axis=3, name="mixed8")
    # mixed 9, 10: 8 x 8 x 2048
    for i in range(2):
        branch1x1 = conv2d_bn(x, 320, 1, 1)
        branch3x3 = conv2d_bn(x, 384, 1, 1)
        branch3x3 = layers.concatenate([conv2d_bn(branch3x3, 384, 1, 3),
                                        conv2d_bn(branch3x3, 384, 3, 1)], axis=3,
                                       name=f"mixed9_{i}")
        dbl = _chain(x, [(448, 1, 1), (384, 3, 3)])
        dbl = layers.concatenate([conv2d_bn(dbl, 384, 1, 3), conv2d_bn(dbl, 384, 3, 1)],
                                 axis=3)
        x = layers.concatenate([branch1x1, branch3x3, dbl, _pool_branch(x, 192)], axis=3,
                               name=f"mixed{9 + i}")
    if include_top:
        x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
        iu.validate_activation(classifier_activation, weights, where)
        x = layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    else:
        x = iu.pooled(x, pooling, None, None)
    fname = f"inception_v3_weights_tf_dim_ordering_tf_kernels{'' if include_top else '_notop'}.h5"
    return iu.finish(img_input, input_tensor, x, name, weights, (fname, WEIGHTS_URL + fname),
                     where)


def preprocess_input(x: Any, data_format: str | None = None) -> Any:
    """InceptionV3's preprocessing: tf mode (pixels scaled to [-1, 1])."""
    return iu.preprocess_input(x, data_format=data_format, mode="tf")


decode_predictions = iu.decode_predictions
