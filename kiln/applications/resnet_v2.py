"""ResNet50V2/101V2/152V2 (Keras' ``keras.applications.resnet_v2``): the architectures live in
:mod:`kiln.applications.resnet`; this module carries their preprocessing (tf mode)."""

from __future__ import annotations

from typing import Any

from kiln.applications import imagenet_utils as iu
from kiln.applications.resnet import ResNet50V2, ResNet101V2, ResNet152V2


def preprocess_input(x: Any, data_format: str | None = None) -> Any:
    """ResNetV2's preprocessing: tf mode (pixels scaled to [-1, 1])."""
    return iu.preprocess_input(x, data_format=data_format, mode="tf")


decode_predictions = iu.decode_predictions

__all__ = ["ResNet50V2", "ResNet101V2", "ResNet152V2", "preprocess_input",
           "decode_predictions"]
