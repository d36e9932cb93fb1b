"""Code generation for the CPU: loop specs and their numba source (``spec``), scalar bodies
as LLVM IR (``llvm_expr``, ``scalars``, ``scalars_numba``), loops as LLVM modules
(``llvm_loop``), native kernels compiled by llvmlite (``native``) with the skeleton the
hand-written ones share (``ir_kernel``), numba's kernels (``jit``) and compile batches
(``compile_batch``).

May import: itself, ``kiln.core`` and ``kiln.core.backends.jit``; never a hand-written kernel
(``kernels``), a product engine (``gemm``) or the runtime.
"""
