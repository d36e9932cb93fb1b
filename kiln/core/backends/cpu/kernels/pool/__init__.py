"""Pooling kernels: the builders (``pool``) and the kernels, native (LLVM IR) only
(``native_pool``).

May import: what ``kernels`` may, and ``kernels.conv.conv`` (its split-call helper).
"""
