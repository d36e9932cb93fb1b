"""The names of issue 44 (``keras.ops.nn``, ``image``, ``linalg``, ``math`` and core ops
beyond kiln's first ops), gathered here so ``kiln/ops/__init__.py`` imports them in one line;
each is also added to its Keras namespace module (``kiln.ops.nn``, ``kiln.ops.image``); the new
namespaces are ``kiln.ops.linalg``, ``kiln.ops.math`` and ``kiln.ops.control`` (Keras' core
ops)."""

from __future__ import annotations

from kiln.ops import control, image_more, image_warp, linalg, math, nn_conv, nn_ctc, nn_more
from kiln.ops import image as _image
from kiln.ops import nn as _nn

# the top level keeps kiln.ops.numpy's norm (kiln.ops.linalg.norm adds the singular-value
# matrix norms to it)
_NAMESPACE_ONLY = {"norm"}

__all__: list[str] = []
for _mod, _ns in [(nn_more, _nn), (nn_conv, _nn), (nn_ctc, _nn), (linalg, linalg),
                  (image_more, _image), (image_warp, _image), (math, math),
                  (control, control)]:
    for _name in _mod.__all__:
        setattr(_ns, _name, getattr(_mod, _name))
        if _name not in _ns.__all__:
            _ns.__all__.append(_name)
        if _name not in _NAMESPACE_ONLY:
            globals()[_name] = getattr(_mod, _name)
            __all__.append(_name)

# Keras 3.15's last ops (complex-valued ones on arrays; rearrange on tensors too): at the top
# level, eig also in kiln.ops.linalg, polar also in kiln.ops.nn (kiln/ops/complex_more.py)
from kiln.ops import complex_more, rearrange  # noqa: E402

for _name, _ns in [("eig", linalg), ("polar", _nn)]:
    setattr(_ns, _name, getattr(complex_more, _name))
    if _name not in _ns.__all__:
        _ns.__all__.append(_name)
for _name in complex_more.__all__ + rearrange.__all__:
    globals()[_name] = getattr(complex_more if _name != "rearrange" else rearrange, _name)
    __all__.append(_name)
