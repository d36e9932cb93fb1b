"""VGG16 and VGG19 ("Very Deep Convolutional Networks for Large-Scale Image Recognition",
ICLR 2015), as Keras 3.15's ``keras.applications.vgg16`` / ``vgg19`` build them, with Keras'
layer names.

Example:
    >>> kiln.applications.VGG16(weights=None).count_params()
    138357544
"""

from __future__ import annotations

from typing import Any

from kiln import layers
from kiln.applications import imagenet_utils as iu

WEIGHTS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/"


def _vgg(convs: tuple[int, ...], key: str, include_top: bool, weights: Any, input_tensor: Any,
         input_shape: Any, pooling: str | None, classes: int, classifier_activation: Any,
         name: str) -> Any:
    where = name
    iu.check_weights(weights, include_top, classes, where)
    input_shape = iu.obtain_input_shape(input_shape, 224, 32, None, include_top, weights,
                                        where)
    img_input = iu.image_input(input_tensor, input_shape, where)
    x = img_input
    for block, (filters, n) in enumerate(zip((64, 128, 256, 512, 512), convs, strict=True), 1):
        for i in range(1, n + 1):
            x = layers.Conv2D(filters, (3, 3), activation="relu", padding="same",
                              name=f"block{block}_conv{i}")(x)
        x = layers.MaxPooling2D((2, 2), strides=(2, 2), name=f"block{block}_pool")(x)
    if include_top:
        x = layers.Flatten(name="flatten")(x)
        x = layers.Dense(4096, activation="relu", name="fc1")(x)
        x = layers.Dense(4096, activation="relu", name="fc2")(x)
        iu.validate_activation(classifier_activation, weights, where)
        x = layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    else:
        x = iu.pooled(x, pooling, None, None)
    fname = f"{key}_weights_tf_dim_ordering_tf_kernels{'' if include_top else '_notop'}.h5"
    return iu.finish(img_input, input_tensor, x, name, weights,
                     (fname, f"{WEIGHTS_URL}{key}/{fname}"), where)


def VGG16(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
          input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
          classes: int = 1000, classifier_activation: Any = "softmax",
          name: str = "vgg16") -> Any:
    """Instantiates the VGG16 model (Keras' ``keras.applications.VGG16``).

    Args:
        include_top: whether to end with Flatten and the three fully connected layers
            (then the input must be 224x224 with ImageNet weights, and static).
        weights: None, "imagenet" (Keras' file from the local cache) or a weights file's path.
        input_tensor: optional symbolic tensor to use as the image input.
        input_shape: (H, W, C) with H, W >= 32.
        pooling: without the top: None, "avg" or "max".
        classes: the classifier's width.
        classifier_activation: the classifier's activation (None: logits).
        name: the model's name.

    Returns:
        A functional ``kiln.Model``; inputs go through ``vgg16.preprocess_input`` (caffe).
    """
    return _vgg((2, 2, 3, 3, 3), "vgg16", include_top, weights, input_tensor, input_shape,
                pooling, classes, classifier_activation, name)


def VGG19(include_top: bool = True, weights: Any = "imagenet",  # noqa: N802
          input_tensor: Any = None, input_shape: Any = None, pooling: str | None = None,
          classes: int = 1000, classifier_activation: Any = "softmax",
          name: str = "vgg19") -> Any:
    """Instantiates the VGG19 model; arguments as in :func:`VGG16`."""
    return _vgg((2, 2, 4, 4, 4), "vgg19", include_top, weights, input_tensor, input_shape,
                pooling, classes, classifier_activation, name)


def preprocess_input(x: Any, data_format: str | None = None) -> Any:
    """VGG's preprocessing: caffe mode (RGB -> BGR, minus the ImageNet channel means)."""
    return iu.preprocess_input(x, data_format=data_format, mode="caffe")


decode_predictions = iu.decode_predictions
