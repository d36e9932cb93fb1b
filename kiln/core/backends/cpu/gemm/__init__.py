"""Every matrix product of the CPU backend behind one interface, ``products`` (plan steps
``MatmulCall`` / ``GemmCall``, ``matmul``, ``gemm``, ``axpy``, and ``products_native``, the
choice of engine per plan), over the engines: kiln's private OpenBLAS (``blas``) and kiln's
own register-blocked kernels (``native_matmul``: Dense products with epilogues,
``native_gemm``: batches of small products and dot products).

May import: ``codegen``, ``target``, the runtime's worker API (``runtime.parts``,
``runtime.cpus``) and ``kiln.core``; never the pools behind that API (``runtime.threads``,
``runtime.spin_pool``) nor a hand-written kernel (``kernels``).
"""
