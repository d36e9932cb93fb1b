"""``kiln.preprocessing`` (Keras 3's ``keras.preprocessing``): the dataset utilities and the
``image`` and ``sequence`` helpers, the same functions as in :mod:`kiln.utils`."""

from kiln.preprocessing import image, sequence
from kiln.utils.image_dataset import image_dataset_from_directory
from kiln.utils.text_dataset import text_dataset_from_directory
from kiln.utils.timeseries import timeseries_dataset_from_array

__all__ = ["image", "sequence", "image_dataset_from_directory", "text_dataset_from_directory",
           "timeseries_dataset_from_array"]
