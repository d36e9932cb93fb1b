"""``kiln.applications``: Keras 3.15's ``keras.applications`` architectures, built from
kiln's layers with Keras' layer names, so that weights saved by Keras load by name.

Each family is a module (``resnet``, ``vgg16``, ``mobilenet_v2`` ...) with its model
functions, ``preprocess_input`` and ``decode_predictions``; the model functions are also
here at the top, as in Keras. Modules load on first use, so ``import kiln`` stays fast.
``weights="imagenet"`` never downloads: it loads Keras' file from its cache folder
(``~/.keras/models``) or says which file to put there.

Example:
    >>> model = kiln.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
    >>> x = kiln.applications.resnet.preprocess_input(images)
"""

from __future__ import annotations

import importlib
from typing import Any

#: module -> the model functions it defines (and Keras exports at the top)
_FAMILIES: dict[str, tuple[str, ...]] = {
    "resnet": ("ResNet50", "ResNet101", "ResNet152"),
    "resnet_v2": ("ResNet50V2", "ResNet101V2", "ResNet152V2"),
    "vgg": ("VGG16", "VGG19"),
    "mobilenet": ("MobileNet", "MobileNetV2"),
    "mobilenet_v3": ("MobileNetV3Small", "MobileNetV3Large"),
    "efficientnet": tuple(f"EfficientNetB{i}" for i in range(8)),
    "efficientnet_v2": ("EfficientNetV2B0", "EfficientNetV2B1", "EfficientNetV2B2",
                        "EfficientNetV2B3", "EfficientNetV2S", "EfficientNetV2M",
                        "EfficientNetV2L"),
    "densenet": ("DenseNet121", "DenseNet169", "DenseNet201"),
    "xception": ("Xception",),
    "inception_v3": ("InceptionV3",),
    "inception_resnet_v2": ("InceptionResNetV2",),
    "nasnet": ("NASNetMobile", "NASNetLarge"),
    "convnext": ("ConvNeXtTiny", "ConvNeXtSmall", "ConvNeXtBase", "ConvNeXtLarge",
                 "ConvNeXtXLarge"),
}
#: Keras' extra module names -> kiln's module
_ALIASES = {"resnet50": "resnet", "vgg16": "vgg", "vgg19": "vgg", "mobilenet_v2": "mobilenet"}

_MODULES = {*_FAMILIES, *_ALIASES, "imagenet_utils"}
_MODELS = {fn: module for module, fns in _FAMILIES.items() for fn in fns}


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f"kiln.applications.{_ALIASES.get(name, name)}")
    if name in _MODELS:
        return getattr(importlib.import_module(f"kiln.applications.{_MODELS[name]}"), name)
    raise AttributeError(f"module 'kiln.applications' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULES, *_MODELS])


__all__ = sorted([*_MODULES, *_MODELS])
