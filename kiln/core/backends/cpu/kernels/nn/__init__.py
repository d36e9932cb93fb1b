"""softmax / log_softmax and the softmax cross-entropies (``nn``) and the native (LLVM IR)
kernels of the small ops every classifier's step needs (``native_nn``: softmax rows, sparse
cross-entropy, one-hot, the uniform generator).

May import: what ``kernels`` may.
"""
