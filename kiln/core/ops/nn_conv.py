"""Convolution and pooling builders, as one import (``kiln.ops`` re-exports them).

The ops live in ``conv.py`` and ``pool.py``, their window arithmetic in ``window.py``.
"""

from kiln.core.ops.conv import conv1d, conv2d, conv2d_transpose
from kiln.core.ops.pool import avg_pool1d, avg_pool2d, max_pool1d, max_pool2d

__all__ = ["conv2d", "conv1d", "conv2d_transpose", "max_pool2d", "avg_pool2d", "max_pool1d",
           "avg_pool1d"]
