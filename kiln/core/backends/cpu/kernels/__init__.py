"""Hand-written kernels of the CPU backend, by family: each module registers the builders of
its ops (``registry.builder``). Elementwise ops, fused groups and generated reductions
(``elementwise``), matmul and gemm (``linalg``), gather, image, sort, random, movement,
reduce and collective ops; the families with several modules are subpackages (``conv``,
``pool``, ``nn``).

May import: ``codegen``, ``gemm``, ``registry``, ``target``, the runtime's worker API
(``runtime.threads``, ``runtime.spin_pool``, ``runtime.parts``, ``runtime.cpus``) and
``kiln.core``; never ``runtime.program``, ``runtime.feeds`` or ``runtime.loop``.
"""
