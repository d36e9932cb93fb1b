"""Hand-written kernels of the CPU backend, by family: each module registers the builders of
its ops (``registry.builder``). Elementwise ops, fused groups and generated reductions
(``elementwise``), matmul and gemm (``linalg``), gather, image, sort, random, movement,
reduce and collective ops; the families with several modules are subpackages (``conv``,
``pool``, ``nn``).

May import: ``codegen``, ``gemm``, ``registry``, ``target``, the runtime's worker API
(``runtime.parts``: a kernel describes its work in parts, the runtime splits and runs them;
``runtime.cpus``) and ``kiln.core``; never the pools behind that API (``runtime.threads``,
``runtime.spin_pool``) nor ``runtime.program``, ``runtime.feeds`` or ``runtime.loop``.
"""
