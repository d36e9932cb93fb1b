"""DenseNet121/169/201 ("Densely Connected Convolutional Networks", CVPR 2017), as Keras
3.15's ``keras.applications.densenet`` builds them, with Keras' layer names.

Example:
    >>> kiln.applications.DenseNet121(weights=None).count_params()
    8062504
"""

from __future__ import annotations

from typing import Any

from kiln import layers
from kiln.applications import imagenet_utils as iu

WEIGHTS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/densenet/"
_EPS = 1.001e-5
_KNOWN = {(6, 12, 24, 16): "densenet121", (6, 12, 32, 32): "densenet169",
          (6, 12, 48, 32): "densenet201"}


def dense_block(x: Any, blocks: int, name: str) -> Any:
    """``blocks`` conv blocks, each concatenating 32 new channels."""
    for i in range(blocks):
        x = conv_block(x, 32, name=f"{name}_block{i + 1}")
    return x


def transition_block(x: Any, reduction: float, name: str) -> Any:
    """BN, ReLU, a 1x1 conv keeping ``reduction`` of the channels, 2x2 average pooling."""
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name=f"{name}_bn")(x)
    x = layers.Activation("relu", name=f"{name}_relu")(x)
    x = layers.Conv2D(int(x.shape[3] * reduction), 1, use_bias=False, name=f"{name}_conv")(x)
    return layers.AveragePooling2D(2, strides=2, name=f"{name}_pool")(x)


def conv_block(x: Any, growth_rate: int, name: str) -> Any:
    """BN-ReLU-1x1 conv, BN-ReLU-3x3 conv, concatenated to the input."""
    x1 = layers.BatchNormalization(axis=3, epsilon=_EPS, name=f"{name}_0_bn")(x)
    x1 = layers.Activation("relu", name=f"{name}_0_relu")(x1)
    x1 = layers.Conv2D(4 * growth_rate, 1, use_bias=False, name=f"{name}_1_conv")(x1)
    x1 = layers.BatchNormalization(axis=3, epsilon=_EPS, name=f"{name}_1_bn")(x1)
    x1 = layers.Activation("relu", name=f"{name}_1_relu")(x1)
    x1 = layers.Conv2D(growth_rate, 3, padding="same", use_bias=False, name=f"{name}_2_conv")(x1)
    return layers.Concatenate(axis=3, name=f"{name}_concat")([x, x1])


def DenseNet(blocks: Any, include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
             input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
             classes: int = 1000, classifier_activation: Any = "softmax",
             name: str = "densenet") -> Any:
    """A DenseNet with ``blocks`` conv blocks in each of its four dense blocks."""
    where = name
    iu.check_weights(weights, include_top, classes, where)
    input_shape = iu.obtain_input_shape(input_shape, 224, 32, None, include_top, weights,
                                        where)
    img_input = iu.image_input(input_tensor, input_shape, where)
    x = layers.ZeroPadding2D(padding=((3, 3), (3, 3)))(img_input)
    x = layers.Conv2D(64, 7, strides=2, use_bias=False, name="conv1_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name="conv1_bn")(x)
    x = layers.Activation("relu", name="conv1_relu")(x)
    x = layers.ZeroPadding2D(padding=((1, 1), (1, 1)))(x)
    x = layers.MaxPooling2D(3, strides=2, name="pool1")(x)
    for stage, n in enumerate(blocks):
        x = dense_block(x, n, name=f"conv{stage + 2}")
        if stage < 3:
            x = transition_block(x, 0.5, name=f"pool{stage + 2}")
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name="bn")(x)
    x = layers.Activation("relu", name="relu")(x)
    if include_top:
        x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
        iu.validate_activation(classifier_activation, weights, where)
        x = layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    else:
        x = iu.pooled(x, pooling)
    key = _KNOWN.get(tuple(blocks))
    if weights == "imagenet" and key is None:
        raise ValueError(f"{where}: ImageNet weights exist only for DenseNet121, 169 and 201; "
                         f"received blocks={list(blocks)}")
    file = None
    if key is not None:
        fname = f"{key}_weights_tf_dim_ordering_tf_kernels{'' if include_top else '_notop'}.h5"
        file = (fname, WEIGHTS_URL + fname)
    return iu.finish(img_input, input_tensor, x, name, weights, file, where)


def DenseNet121(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
                input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
                classes: int = 1000, classifier_activation: Any = "softmax",
                name: str = "densenet121") -> Any:
    """Instantiates the DenseNet121 architecture (Keras' ``keras.applications.DenseNet121``).

    Args:
        include_top, weights, input_tensor, input_shape, pooling, classes,
        classifier_activation, name: as in ``ResNet50`` (input sides >= 32).

    Returns:
        A functional ``kiln.Model``; inputs go through ``densenet.preprocess_input`` (torch).
    """
    return DenseNet([6, 12, 24, 16], include_top, weights, input_tensor, input_shape, pooling,
                    classes, classifier_activation, name)


def DenseNet169(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
                input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
                classes: int = 1000, classifier_activation: Any = "softmax",
                name: str = "densenet169") -> Any:
    """Instantiates the DenseNet169 architecture; arguments as in :func:`DenseNet121`."""
    return DenseNet([6, 12, 32, 32], include_top, weights, input_tensor, input_shape, pooling,
                    classes, classifier_activation, name)


def DenseNet201(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
                input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
                classes: int = 1000, classifier_activation: Any = "softmax",
                name: str = "densenet201") -> Any:
    """Instantiates the DenseNet201 architecture; arguments as in :func:`DenseNet121`."""
    return DenseNet([6, 12, 48, 32], include_top, weights, input_tensor, input_shape, pooling,
                    classes, classifier_activation, name)


def preprocess_input(x: Any, data_format: str | None = None) -> Any:
    """DenseNet's preprocessing: torch mode (scaled to [0, 1], normalized per channel)."""
    return iu.preprocess_input(x, data_format=data_format, mode="torch")


decode_predictions = iu.decode_predictions
