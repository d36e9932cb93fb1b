"""Pooling kernels: the builders and numba kernels (``pool``) and their native (LLVM IR)
twins (``native_pool``).

May import: what ``kernels`` may, and ``kernels.conv.conv`` (its split-call helper).
"""
