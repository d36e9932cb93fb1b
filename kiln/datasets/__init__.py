"""Keras-compatible datasets: ``mnist``, ``fashion_mnist``, ``imdb``, ``reuters``, ``cifar10``,
``cifar100``, ``boston_housing`` and ``california_housing``.

``mnist`` and ``fashion_mnist`` have ``load_data(path=None)`` returning
``((x_train, y_train), (x_test, y_test))`` as ``uint8`` arrays; ``mnist.load_sample()`` returns
a 10,000/2,000 sample shipped with kiln. ``imdb.load_data(...)`` takes Keras' arguments
(``num_words``, ``skip_top``, ``maxlen``, ...) and returns reviews as object arrays of lists
of word indices; ``imdb.get_word_index()`` returns the word -> index dict.

Example:
    >>> from kiln.datasets import mnist
    >>> (x_train, y_train), (x_test, y_test) = mnist.load_sample()
    >>> x_train.dtype, len(y_test)
    (dtype('uint8'), 2000)
"""

from kiln.datasets import (
    boston_housing,
    california_housing,
    cifar10,
    cifar100,
    fashion_mnist,
    imdb,
    mnist,
    reuters,
)
from kiln.datasets._fetch import DownloadError
from kiln.datasets._source import DatasetNotFoundError

__all__ = ["DatasetNotFoundError", "DownloadError", "boston_housing", "california_housing",
           "cifar10", "cifar100", "fashion_mnist", "imdb", "mnist", "reuters"]
