"""Utilities (``keras.utils``): seeding, one-hot labels, padding sequences, datasets of
windows, folders and ``PyDataset`` batches, files from URLs, images, and (with the viz
extra) pictures of models and training."""

from __future__ import annotations

import sys

import numpy as np

from kiln.random_state import set_seed as _set_seed
from kiln.saving import (
    get_custom_objects,
    get_registered_name,
    get_registered_object,
    register_keras_serializable,
)
from kiln.saving.keras_objects import (
    CustomObjectScope,
    custom_object_scope,
    serialize_keras_object,
)
from kiln.utils.audio_dataset import audio_dataset_from_directory
from kiln.utils.dataset_ops import Dataset
from kiln.utils.feature_space import FeatureSpace
from kiln.utils.files import get_file
from kiln.utils.image_dataset import image_dataset_from_directory
from kiln.utils.image_utils import array_to_img, img_to_array, load_img, save_img
from kiln.utils.keras_utils import (
    Config,
    clear_session,
    deserialize_keras_object,
    disable_interactive_logging,
    enable_interactive_logging,
    get_source_inputs,
    is_interactive_logging_enabled,
    is_keras_tensor,
    pack_x_y_sample_weight,
    standardize_dtype,
    unpack_x_y_sample_weight,
)
from kiln.utils.model_dot import model_to_dot
from kiln.utils.numerical import normalize, to_categorical
from kiln.utils.plot import plot_history, plot_model
from kiln.utils.progbar import Progbar
from kiln.utils.py_dataset import PyDataset, Sequence
from kiln.utils.sequence import pad_sequences
from kiln.utils.split import split_dataset
from kiln.utils.text_dataset import text_dataset_from_directory
from kiln.utils.tf_interop import set_dataset_format
from kiln.utils.timeseries import timeseries_dataset_from_array


def set_random_seed(seed: int) -> None:
    """Makes weight initialization, dropout and shuffling reproducible.

    Two runs of the same script with the same seed give bit-identical weights. Seeds Python's
    and NumPy's global generators too, and, as Keras does, TensorFlow's global seed when
    TensorFlow is loaded (``tf.data`` pipelines shuffle with it; with
    ``tf.config.experimental.enable_op_determinism()`` they need it). kiln never imports
    TensorFlow for this.

    Example:
        >>> kiln.utils.set_random_seed(42)
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ValueError("Expected `seed` argument to be an integer. Received: "
                         f"seed={seed!r} (of type {type(seed)})")
    _set_seed(seed)
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "random"):
        tf.random.set_seed(int(seed))


__all__ = ["set_random_seed", "plot_model", "plot_history", "pad_sequences", "to_categorical",
           "normalize", "timeseries_dataset_from_array", "PyDataset", "Sequence", "get_file",
           "image_dataset_from_directory", "text_dataset_from_directory", "load_img",
           "img_to_array", "array_to_img", "save_img", "Dataset", "set_dataset_format",
           "FeatureSpace", "Config", "CustomObjectScope", "custom_object_scope", "Progbar",
           "clear_session", "serialize_keras_object", "deserialize_keras_object",
           "get_custom_objects", "get_registered_name", "get_registered_object",
           "register_keras_serializable", "get_source_inputs", "is_keras_tensor",
           "pack_x_y_sample_weight", "unpack_x_y_sample_weight", "split_dataset",
           "standardize_dtype", "enable_interactive_logging", "disable_interactive_logging",
           "is_interactive_logging_enabled", "model_to_dot", "audio_dataset_from_directory"]
