"""All ops, by family; importing this package registers every op."""

from kiln.core.ops import (  # noqa: F401  (registration side effects)
    _overloads,  # noqa: F401
    bitwise,
    collective,
    conv,
    custom,
    elementwise,
    fused,
    image,
    linalg,
    linalg_host,
    movement,
    nn,
    pool,
    random,
    reduce,
    scan,
    sort,
    source,
)
from kiln.core.ops.registry import KERNELS, Example, OpDef, all_ops, apply, get_op, register

__all__ = ["OpDef", "Example", "KERNELS", "register", "get_op", "all_ops", "apply"]
