"""The dataset utilities return kiln's own datasets in these tests unless a test asks for
TensorFlow's (``kiln.utils.set_dataset_format("tf")``), so they run the same with and
without TensorFlow installed."""

import pytest

from kiln.utils import tf_interop


@pytest.fixture(autouse=True)
def _kiln_datasets():
    saved = tf_interop._format[0]
    tf_interop._format[0] = "kiln"
    yield
    tf_interop._format[0] = saved
