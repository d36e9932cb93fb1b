"""The runtime of the CPU backend: the program (``program``: plans of buffers and kernel
calls, ``feeds``: feeds read in place, ``loop``: ``scan`` bodies as sub-programs) and the
worker API that runs a kernel's parts (``parts``: the one entry point, where kernels describe
their work in parts and the runtime decides the part count and the engine; behind it
``threads``: kiln's portable pool and ``SplitCall``, ``spin_pool``: workers waiting in native
code; ``cpus``: thread counts and CPU placement).

May import: ``codegen``, ``gemm``, ``kernels`` (``program`` and ``loop`` only), ``registry``,
``lowering``, ``target`` and ``kiln.core``. The worker API (``threads``, ``spin_pool``,
``parts``, ``cpus``) imports only ``codegen`` and itself, so kernels and engines may use it.
"""
