"""ResNet50/101/152 (v1, "Deep Residual Learning for Image Recognition", CVPR 2015) and
ResNet50V2/101V2/152V2 (pre-activation, "Identity Mappings in Deep Residual Networks"), as
Keras 3.15's ``keras.applications.resnet`` / ``resnet_v2`` build them, with Keras' layer
names (so Keras' weight files load by name).

Example:
    >>> model = kiln.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
    >>> model.count_params()
    23608202
"""

from __future__ import annotations

from typing import Any

from kiln import layers
from kiln.applications import imagenet_utils as iu

WEIGHTS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/resnet/"
_EPS = 1.001e-5


def ResNet(stack_fn: Any, preact: bool, use_bias: bool, include_top: bool = True,  # noqa: N802
           weights: Any = "imagenet", input_tensor: Any = None, input_shape: Any = None,
           pooling: str | None = None, classes: int = 1000,
           classifier_activation: Any = "softmax", name: str = "resnet",
           weights_name: str | None = None) -> Any:
    """The ResNet / ResNetV2 body around ``stack_fn`` (the stacked residual blocks).

    Args:
        stack_fn: tensor -> tensor, the residual stages.
        preact: True for ResNetV2 (pre-activation), False for ResNet.
        use_bias: whether the stem convolution has a bias.
        include_top, weights, input_tensor, input_shape, pooling, classes,
        classifier_activation, name: as in :func:`ResNet50`.
        weights_name: the stem of Keras' ImageNet weight file names (e.g. "resnet50").
    """
    where = name
    iu.check_weights(weights, include_top, classes, where)
    input_shape = iu.obtain_input_shape(input_shape, 224, 32, None, include_top, weights,
                                        where)
    img_input = iu.image_input(input_tensor, input_shape, where)
    x = layers.ZeroPadding2D(padding=((3, 3), (3, 3)), name="conv1_pad")(img_input)
    x = layers.Conv2D(64, 7, strides=2, use_bias=use_bias, name="conv1_conv")(x)
    if not preact:
        x = layers.BatchNormalization(axis=3, epsilon=_EPS, name="conv1_bn")(x)
        x = layers.Activation("relu", name="conv1_relu")(x)
    x = layers.ZeroPadding2D(padding=((1, 1), (1, 1)), name="pool1_pad")(x)
    x = layers.MaxPooling2D(3, strides=2, name="pool1_pool")(x)
    x = stack_fn(x)
    if preact:
        x = layers.BatchNormalization(axis=3, epsilon=_EPS, name="post_bn")(x)
        x = layers.Activation("relu", name="post_relu")(x)
    if include_top:
        x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
        iu.validate_activation(classifier_activation, weights, where)
        x = layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    else:
        x = iu.pooled(x, pooling)
    file = None
    if weights_name is not None:
        top = "" if include_top else "_notop"
        fname = f"{weights_name}_weights_tf_dim_ordering_tf_kernels{top}.h5"
        file = (fname, WEIGHTS_URL + fname)
    return iu.finish(img_input, input_tensor, x, name, weights, file, where)


def residual_block_v1(x: Any, filters: int, kernel_size: int = 3, stride: int = 1,
                      conv_shortcut: bool = True, name: str | None = None) -> Any:
    """The bottleneck block of ResNet v1: 1x1, kxk, 1x1 (4 * filters), plus the shortcut."""
    if conv_shortcut:
        shortcut = layers.Conv2D(4 * filters, 1, strides=stride, name=f"{name}_0_conv")(x)
        shortcut = layers.BatchNormalization(axis=3, epsilon=_EPS, name=f"{name}_0_bn")(shortcut)
    else:
        shortcut = x
    x = layers.Conv2D(filters, 1, strides=stride, name=f"{name}_1_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name=f"{name}_1_bn")(x)
    x = layers.Activation("relu", name=f"{name}_1_relu")(x)
    x = layers.Conv2D(filters, kernel_size, padding="same", name=f"{name}_2_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name=f"{name}_2_bn")(x)
    x = layers.Activation("relu", name=f"{name}_2_relu")(x)
    x = layers.Conv2D(4 * filters, 1, name=f"{name}_3_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name=f"{name}_3_bn")(x)
    x = layers.Add(name=f"{name}_add")([shortcut, x])
    return layers.Activation("relu", name=f"{name}_out")(x)


def stack_residual_blocks_v1(x: Any, filters: int, blocks: int, stride1: int = 2,
                             name: str | None = None) -> Any:
    """``blocks`` v1 blocks; the first has the projection shortcut and stride ``stride1``."""
    x = residual_block_v1(x, filters, stride=stride1, name=f"{name}_block1")
    for i in range(2, blocks + 1):
        x = residual_block_v1(x, filters, conv_shortcut=False, name=f"{name}_block{i}")
    return x


def residual_block_v2(x: Any, filters: int, kernel_size: int = 3, stride: int = 1,
                      conv_shortcut: bool = False, name: str | None = None) -> Any:
    """The pre-activation bottleneck block of ResNet v2 (the stride sits on the kxk conv)."""
    preact = layers.BatchNormalization(axis=3, epsilon=_EPS, name=f"{name}_preact_bn")(x)
    preact = layers.Activation("relu", name=f"{name}_preact_relu")(preact)
    if conv_shortcut:
        shortcut = layers.Conv2D(4 * filters, 1, strides=stride, name=f"{name}_0_conv")(preact)
    else:
        shortcut = layers.MaxPooling2D(1, strides=stride)(x) if stride > 1 else x
    x = layers.Conv2D(filters, 1, strides=1, use_bias=False, name=f"{name}_1_conv")(preact)
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name=f"{name}_1_bn")(x)
    x = layers.Activation("relu", name=f"{name}_1_relu")(x)
    x = layers.ZeroPadding2D(padding=((1, 1), (1, 1)), name=f"{name}_2_pad")(x)
    x = layers.Conv2D(filters, kernel_size, strides=stride, use_bias=False,
                      name=f"{name}_2_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name=f"{name}_2_bn")(x)
    x = layers.Activation("relu", name=f"{name}_2_relu")(x)
    x = layers.Conv2D(4 * filters, 1, name=f"{name}_3_conv")(x)
    return layers.Add(name=f"{name}_out")([shortcut, x])


def stack_residual_blocks_v2(x: Any, filters: int, blocks: int, stride1: int = 2,
                             name: str | None = None) -> Any:
    """``blocks`` v2 blocks; the first projects, the last strides by ``stride1``."""
    x = residual_block_v2(x, filters, conv_shortcut=True, name=f"{name}_block1")
    for i in range(2, blocks):
        x = residual_block_v2(x, filters, name=f"{name}_block{i}")
    return residual_block_v2(x, filters, stride=stride1, name=f"{name}_block{blocks}")


#: (name, version, blocks per stage conv2..conv5)
_DEPTHS = {
    "resnet50": (1, (3, 4, 6, 3)), "resnet101": (1, (3, 4, 23, 3)),
    "resnet152": (1, (3, 8, 36, 3)), "resnet50v2": (2, (3, 4, 6, 3)),
    "resnet101v2": (2, (3, 4, 23, 3)), "resnet152v2": (2, (3, 8, 36, 3)),
}


def _resnet(key: str, include_top: bool, weights: Any, input_tensor: Any, input_shape: Any,
            pooling: str | None, classes: int, classifier_activation: Any, name: str) -> Any:
    version, blocks = _DEPTHS[key]
    filters = (64, 128, 256, 512)

    def stack_fn(x: Any) -> Any:
        for stage, (f, n) in enumerate(zip(filters, blocks, strict=True)):
            label = f"conv{stage + 2}"
            if version == 1:
                x = stack_residual_blocks_v1(x, f, n, stride1=1 if stage == 0 else 2, name=label)
            else:
                x = stack_residual_blocks_v2(x, f, n, stride1=1 if stage == 3 else 2, name=label)
        return x

    return ResNet(stack_fn, preact=version == 2, use_bias=True, include_top=include_top,
                  weights=weights, input_tensor=input_tensor, input_shape=input_shape,
                  pooling=pooling, classes=classes, classifier_activation=classifier_activation,
                  name=name, weights_name=key)


def ResNet50(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
             input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
             classes: int = 1000, classifier_activation: Any = "softmax",
             name: str = "resnet50") -> Any:
    """Instantiates the ResNet50 architecture (Keras' ``keras.applications.ResNet50``).

    Args:
        include_top: whether to end with the global average pooling and the classifier.
        weights: None (random initialization), "imagenet" (Keras' file from the local cache,
            never downloaded) or the path of a weights file.
        input_tensor: optional symbolic tensor to use as the image input.
        input_shape: (H, W, 3) with H, W >= 32; default (224, 224, 3) with the top.
        pooling: without the top: None (4D features), "avg" or "max" (2D features).
        classes: the classifier's width (1000 with ImageNet weights).
        classifier_activation: the classifier's activation (None: logits).
        name: the model's name.

    Returns:
        A functional ``kiln.Model``. Inputs are preprocessed with
        ``kiln.applications.resnet.preprocess_input`` (caffe mode).
    """
    return _resnet("resnet50", include_top, weights, input_tensor, input_shape, pooling,
                   classes, classifier_activation, name)


def ResNet101(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
              input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
              classes: int = 1000, classifier_activation: Any = "softmax",
              name: str = "resnet101") -> Any:
    """Instantiates the ResNet101 architecture; arguments as in :func:`ResNet50`."""
    return _resnet("resnet101", include_top, weights, input_tensor, input_shape, pooling,
                   classes, classifier_activation, name)


def ResNet152(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
              input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
              classes: int = 1000, classifier_activation: Any = "softmax",
              name: str = "resnet152") -> Any:
    """Instantiates the ResNet152 architecture; arguments as in :func:`ResNet50`."""
    return _resnet("resnet152", include_top, weights, input_tensor, input_shape, pooling,
                   classes, classifier_activation, name)


def ResNet50V2(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
               input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
               classes: int = 1000, classifier_activation: Any = "softmax",
               name: str = "resnet50v2") -> Any:
    """Instantiates the ResNet50V2 architecture; arguments as in :func:`ResNet50`. Inputs
    are preprocessed with ``kiln.applications.resnet_v2.preprocess_input`` (tf mode)."""
    return _resnet("resnet50v2", include_top, weights, input_tensor, input_shape, pooling,
                   classes, classifier_activation, name)


def ResNet101V2(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
                input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
                classes: int = 1000, classifier_activation: Any = "softmax",
                name: str = "resnet101v2") -> Any:
    """Instantiates the ResNet101V2 architecture; arguments as in :func:`ResNet50`."""
    return _resnet("resnet101v2", include_top, weights, input_tensor, input_shape, pooling,
                   classes, classifier_activation, name)


def ResNet152V2(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
                input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
                classes: int = 1000, classifier_activation: Any = "softmax",
                name: str = "resnet152v2") -> Any:
    """Instantiates the ResNet152V2 architecture; arguments as in :func:`ResNet50`."""
    return _resnet("resnet152v2", include_top, weights, input_tensor, input_shape, pooling,
                   classes, classifier_activation, name)


def preprocess_input(x: Any, data_format: str | None = None) -> Any:
    """ResNet's preprocessing: caffe mode (RGB -> BGR, minus the ImageNet channel means)."""
    return iu.preprocess_input(x, data_format=data_format, mode="caffe")


decode_predictions = iu.decode_predictions
