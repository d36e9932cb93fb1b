"""The functions of ``scalars.py`` registered with numba (``register_jitable``), for the numba
kernels that call them (generated loops with ``KILN_NATIVE=0``, the float32 softmax rows).
Imported only by those kernels' sources: a program of native kernels never imports numba."""

from __future__ import annotations

import numba

from kiln.core.backends.cpu import scalars

# register_jitable registers the function object itself: sigmoid32's call of exp_neg32 (a
# global of scalars.py) resolves to the registered function too
exp_reduced32 = numba.extending.register_jitable(scalars.exp_reduced32)
exp_neg32 = numba.extending.register_jitable(scalars.exp_neg32)
tanh32 = numba.extending.register_jitable(scalars.tanh32)
sigmoid32 = numba.extending.register_jitable(scalars.sigmoid32)
exp32 = numba.extending.register_jitable(scalars.exp32)
log32 = numba.extending.register_jitable(scalars.log32)
log1p32 = numba.extending.register_jitable(scalars.log1p32)
expm1_32 = numba.extending.register_jitable(scalars.expm1_32)
row_max32 = numba.extending.register_jitable(scalars.row_max32)
row_max = numba.extending.register_jitable(scalars.row_max)
row_sum = numba.extending.register_jitable(scalars.row_sum)
row_sum32 = numba.extending.register_jitable(scalars.row_sum32)
