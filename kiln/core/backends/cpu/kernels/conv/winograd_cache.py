"""A Winograd convolution's kernel transform made once per version of its weights, where the
plan reads the kernel straight from a Variable it does not update (a ``predict`` plan): the
transform (~28 us for the MNIST convnet's 3x3 32 -> 64 kernel, as long as a batch-1 call's
whole convolution) then runs at the first call and again only after the weights change
(``Variable.assign``, ``set_weights``, a training step: each bumps the Variable's
``_version``), not at every call (issue 47: serving).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.core.backends.cpu import options, target
from kiln.core.ir import Node

# The cache: options.winograd_cache. Output positions from which a forward Winograd convolution pays
# where its kernel is transformed once (a predict plan; options.winograd_min_outputs where it is
# transformed at every call): options.winograd_cached_min_outputs(_no_tiles), 80 against the
# register tiles (target.tile_conv), 25 (the fewest measured) against the direct loops
# (a host without the tiles; measured as AVX2's before the tiles ran there). A Conv2D(64, 3)
# + ReLU on one image of C = 32 channels, median us a predict_on_batch,
# direct against Winograd, 2-core Zen 4 under load (AVX2: KILN_CPU=x86-64-v3): 25 positions 8.0 /
# 13.1 (AVX2 16.9 / 15.2), 49: 12.2 / 13.2 (24.1 / 15.2), 81: 17.2 / 15.9 (33.9 / 19.3), 121: 22.4 /
# 16.4 (45.8 / 19.7), 225: 34.3 / 23.8 (77.7 / 32.1); 13 x 13, 64 -> 64: 58.5 / 42.8 (113.3 / 58.1).


class TransformOnce:
    """``fn(*args)`` run only when ``var``'s version differs from the one it last ran at (its
    result, a buffer of the plan's own, still holds the transform of the current weights)."""

    __slots__ = ("fn", "var", "seen", "__name__")

    def __init__(self, fn: Callable, var: Any):
        self.fn, self.var, self.seen = fn, var, None
        self.__name__ = getattr(fn, "__name__", "winograd_kernel")

    def __call__(self, *args: Any) -> None:
        version = self.var._version
        if version != self.seen:
            self.fn(*args)
            self.seen = version


def weights(b, w_node: Node, w: np.ndarray) -> Any:
    """The Variable whose buffer ``w`` is (``w_node`` a ``param`` node, ``w`` its value as
    the plan reads it, not a copy) when the plan being built does not update it; else None."""
    if not options.current().winograd_cache or w_node.op != "param":
        return None
    var = w_node.attrs.get("var")
    value = getattr(var, "_value", None)
    if value is None or not hasattr(var, "_version") or not np.shares_memory(value, w):
        return None
    if any(v is var for _, v in b.program.updates):
        return None  # a training step writes it in place: transformed at every call
    return var


def pays(b, w_node: Node, w: np.ndarray, out_shape: tuple) -> bool:
    """Whether a forward convolution into an NHWC ``out_shape`` whose kernel :func:`weights`
    finds has enough output positions for Winograd without the kernel transform's cost."""
    positions = int(np.prod(out_shape[:-1], dtype=np.int64))
    opts = options.current()
    least = (opts.winograd_cached_min_outputs if target.current().tile_conv
             else opts.winograd_cached_min_outputs_no_tiles)
    return positions >= least and weights(b, w_node, w) is not None


def once(b, w_node: Node, w: np.ndarray, fn: Callable) -> Callable:
    """``fn`` (a kernel transform reading ``w``), made once per version of ``w``'s Variable
    where :func:`weights` finds one, else ``fn`` itself."""
    var = weights(b, w_node, w)
    return fn if var is None else TransformOnce(fn, var)
