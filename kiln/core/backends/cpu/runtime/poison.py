"""``KILN_POISON=1`` (docs/configuration.md): every buffer a CPU plan allocates (its arena, its
feed buffers, a scan body's step buffers, contiguous scratch copies) starts filled with 0xFF
bytes, NaN in every float dtype and -1 in the integer ones, instead of whatever the allocator
returns. A kernel that reads memory nothing wrote then gives NaN at once, in every process,
instead of a plausible value that depends on the process's history (a scan body once read a
step input from a never-written feed buffer: tests/core/test_scan_binding.py). A debugging
and CI switch: one fill per allocation; results of correct plans are the same bits."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln import config
from kiln.core import aligned


def enabled() -> bool:
    return config.env_flag("KILN_POISON", False)


def empty(shape: Any, dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)`` starting a cache line (``kiln.core.aligned``), filled with
    0xFF bytes under ``KILN_POISON=1``."""
    out = aligned.empty(shape, dtype)
    if out.size and enabled():
        out.reshape(-1).view(np.uint8).fill(0xFF)
    return out
