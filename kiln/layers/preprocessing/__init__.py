"""Preprocessing and augmentation layers (Keras 3 names, arguments and defaults).

* numerical (in the graph): ``Rescaling``, ``Normalization`` (``adapt``), ``Discretization``
  (``adapt``), ``CategoryEncoding``;
* images (in the graph): ``Resizing``, ``CenterCrop``, and the random augmentations
  ``RandomFlip``, ``RandomRotation``, ``RandomZoom``, ``RandomTranslation``,
  ``RandomContrast``, ``RandomBrightness``, ``RandomCrop`` (active in training only);
* data preparation on the host (NumPy arrays in, NumPy arrays out): ``StringLookup``,
  ``Hashing``, ``TextVectorization``, and ``IntegerLookup`` (which also runs in the graph on
  integer tensors).

Called on TensorFlow tensors (inside ``tf.data.Dataset.map``) they all compute with TF ops
(``tf_data.py``), as Keras 3's preprocessing layers do there.

See docs/layers.md, "Preprocessing".
"""

from kiln.layers.preprocessing.augment import (
    RandomBrightness,
    RandomContrast,
    RandomCrop,
    RandomFlip,
    RandomRotation,
    RandomTranslation,
    RandomZoom,
)
from kiln.layers.preprocessing.encoding import CategoryEncoding
from kiln.layers.preprocessing.hashed_crossing import HashedCrossing
from kiln.layers.preprocessing.hashing import Hashing
from kiln.layers.preprocessing.image import CenterCrop, Resizing
from kiln.layers.preprocessing.lookup import IntegerLookup, StringLookup
from kiln.layers.preprocessing.numerical import Discretization, Normalization, Rescaling
from kiln.layers.preprocessing.text_vectorization import TextVectorization

__all__ = [
    "Rescaling", "Normalization", "Discretization", "CategoryEncoding",
    "Resizing", "CenterCrop",
    "RandomFlip", "RandomRotation", "RandomZoom", "RandomTranslation", "RandomContrast",
    "RandomBrightness", "RandomCrop",
    "StringLookup", "IntegerLookup", "Hashing", "TextVectorization",
    "HashedCrossing",
]
