"""The rest of Keras 3's ``keras.ops.numpy`` in kiln (issue 44), gathered for
``kiln.ops.numpy``: elementwise math (:mod:`kiln.ops.numpy_math`), arrays, shapes and
products (:mod:`kiln.ops.numpy_array`), statistics, counting and searching
(:mod:`kiln.ops.numpy_stats`). All are composites of the core's primitives: eager on arrays,
symbolic on tensors, with the primitives' gradients."""

# ruff: noqa: F401, F403
from kiln.ops.numpy_array import *
from kiln.ops.numpy_array import __all__ as _array_all
from kiln.ops.numpy_math import *
from kiln.ops.numpy_math import __all__ as _math_all
from kiln.ops.numpy_special import *
from kiln.ops.numpy_special import __all__ as _special_all
from kiln.ops.numpy_stats import *
from kiln.ops.numpy_stats import __all__ as _stats_all

__all__ = list(_math_all) + list(_array_all) + list(_stats_all) + list(_special_all)
