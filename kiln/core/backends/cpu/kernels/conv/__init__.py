"""Convolution kernels: the builders and numba kernels (``conv``, grouped ones in
``conv_groups``), the register-tiled path (``conv_tile`` over ``native_tile``), Winograd
(``winograd``, ``winograd_pipeline``, ``native_winograd``) and the native (LLVM IR) twins
(``native_conv``, ``native_groups``, ``native_blocked``).

May import: what ``kernels`` may, and ``kernels.pool.native_pool`` (the twins' table).
"""
