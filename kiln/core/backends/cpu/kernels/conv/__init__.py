"""Convolution kernels: the ops' builders, which pick how each node runs (``builders``);
the settings and split calls (``conv``); grouped ones (``conv_groups``); the register-tiled
path (``conv_tile`` over ``native_tile``); Winograd (``winograd``: geometry, transforms and
products, ``winograd_pipeline``: pipelines over chunks of images, ``winograd_ops``: the three
convolutions the builders call, ``native_winograd``); and the kernels, each in one
implementation, native (LLVM IR: ``native_conv``, ``native_groups``, ``native_blocked``).

May import: what ``kernels`` may, and ``kernels.pool.native_pool`` (the kernels' table). Inside
the package the arrows point from ``builders`` down to ``winograd_ops``, ``conv_tile`` and
``conv_groups``, and from all of them to ``conv``, which imports none of them.
"""
