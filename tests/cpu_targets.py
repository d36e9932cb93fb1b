"""Kernel choices as on a named kind of CPU, whatever the host (importable as
``cpu_targets``: pytest puts ``tests/`` on the path through its conftest).

The CPU backend reads the CPU in one place (``kiln/core/backends/cpu/target.py``); a test sets
the CPU it means there, and nowhere else. Code is still generated for the host (LLVM
legalizes AVX-512's 16-lane vectors to AVX2's 8 lanes), so the results hold on any x86 host.
"""

from __future__ import annotations

import dataclasses

from kiln.core.backends.cpu import target

AVX2 = frozenset({"avx", "avx2", "fma"})  # x86-64-v3 (Haswell, Zen 1-3)
AVX512 = AVX2 | {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}  # x86-64-v4


def emulated(avx512: bool) -> target.CpuTarget:
    """The process's target with an AVX-512 (x86-64-v4) or AVX2 (x86-64-v3) CPU's features."""
    return dataclasses.replace(target.process(), name="x86-64-v4" if avx512 else "x86-64-v3",
                               features=AVX512 if avx512 else AVX2)


def cpu(avx512: bool):
    """A ``with`` block in which kernels are chosen as for :func:`emulated` ``(avx512)``."""
    return target.use(emulated(avx512))


def set_cpu(monkeypatch, avx512: bool) -> None:
    """Kernels chosen as for :func:`emulated` until ``monkeypatch`` undoes it (the test's end)."""
    monkeypatch.setattr(target, "_override", [emulated(avx512)])
