"""The functions of ``scalars.py`` registered with numba (``register_jitable``), for the numba
kernels that call them (generated loops with ``KILN_NATIVE=0``), under the same names.
Imported only by those kernels' sources: a program of native kernels never imports numba."""

from __future__ import annotations

import numba

from kiln.core.backends.cpu.codegen import scalars

# register_jitable registers the function object itself: sigmoid32's call of exp_neg32 (a
# global of scalars.py) resolves to the registered function too
for _name in ("exp_reduced32", "exp_neg32", "tanh32", "sigmoid32", "exp32", "log32", "log1p32",
              "expm1_32", "erf32", "trig_pick", "trig32", "sin32", "cos32"):
    globals()[_name] = numba.extending.register_jitable(getattr(scalars, _name))
