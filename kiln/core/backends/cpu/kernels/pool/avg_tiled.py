"""Average pooling over windows that tile the input (pool size = strides, no padding before,
the windows inside the image: ``pool._tiled``), few channels (LeNet-5's 2x2 pooling of 28 x 28
x 6 and 10 x 10 x 16; issue 47): the window size and the channel count are constants of the
kernel, so every tap of every channel of a window is a register (unrolled, no window bounds,
no count loop), where ``native_pool.avg_pool_ir`` walks the window with bounds checks and
loops of ``C`` = 6 iterations per tap.

The same arithmetic, in the same order, as ``native_pool.avg_pool_ir`` /
``avg_pool_grad_ir``: the taps added row-major in ``dtype``, divided by their integer count;
the gradient ``ct / count`` written once into each tap (the same bits, up to the sign of a
zero).
The argument layout of ``native_pool`` (flat arrays; ``p`` holds the shapes, then ``[ph, pw,
sh, sw, pt, pl]``, then ``n0, n1``).
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.codegen.ir_kernel import _check, _Kernel
from kiln.core.backends.cpu.kernels.pool.native_pool import _zero_past_windows
from kiln.core.backends.cpu.runtime.parts import native_split

# At most this many channels are unrolled (more: a loop over the channels, which the
# generic kernel vectorizes as well); at most avg_pool_max_taps taps (2x2, 3x3 ... 4x4
# windows), avg_pool_max_channels channels (options.CpuOptions).
# The gradient takes at most this many channels: in LeNet-5's training step (one thread, the
# minimum over 37 steps) its 28 x 28 x 6 gradient ran 434 -> 68-71 us, but its 10 x 10 x 16
# one 43-45 -> 74-85 us (alone, with its buffers in cache, both kernels ran 28 and 18 us:
# the generic kernel's zeroing pass first seems to suit a cold output better):
# avg_pool_max_grad_channels.


def usable(p: np.ndarray, x_shape: tuple, out_shape: tuple, dtype: np.dtype) -> bool:
    """Whether the tiled kernels take this pooling: floating point, windows that tile the input
    (pool size = strides, no padding before, all inside), at most ``avg_pool_max_taps`` taps and
    ``avg_pool_max_channels`` channels."""
    ph, pw, sh, sw, pt, pl = (int(v) for v in p)
    return (np.dtype(dtype).kind == "f" and ph == sh and pw == sw and pt == 0 and pl == 0
            and ph * pw <= options.current().avg_pool_max_taps
            and 0 < x_shape[3] <= options.current().avg_pool_max_channels
            and out_shape[1] * sh <= x_shape[1] and out_shape[2] * sw <= x_shape[2])


def avg_pool_tiled_ir(symbol: str, dtype: str, ph: int, pw: int, c: int) -> str:
    """``(out (N, OH, OW, c), x (N, H, W, c), p)``: each window's ``ph * pw`` taps of each of
    the ``c`` channels summed (row-major) and divided by ``ph * pw``."""
    _check(dtype, "avg_pool_tiled")
    k = _Kernel((4, 4), 6)
    f = k.f
    _, oh, ow, _ = k.dims[0]
    loops = k.open(oh, ow)
    n, i, j = (var for var, _ in loops)
    orow = k.index(k.dims[0], n, i, j)
    taps = [k.index(k.dims[1], n, f.add(f.mul(i, str(ph)), str(a)),
                    f.add(f.mul(j, str(pw)), str(b))) for a in range(ph) for b in range(pw)]
    count = f.scalar(str(ph * pw), {})
    for ch in range(c):
        # in ``dtype`` from the first tap (the generic kernel's 0 + x0 is x0 but for -0.0),
        # then divided by the integer count as it does (float / int: in float64)
        s = f.load("%x", dtype, f.add(taps[0], str(ch)))
        for t in taps[1:]:
            s = f.expr.arith("+", s, f.load("%x", dtype, f.add(t, str(ch))))
        f.store("%out", dtype, f.add(orow, str(ch)), f.expr.arith("/", s, count))
    k.close(loops)
    return f.function(symbol, ["out", "x", "p"], noalias=True)


def avg_pool_grad_tiled_ir(symbol: str, dtype: str, ph: int, pw: int, c: int) -> str:
    """``(dx (N, H, W, c), ct (N, OH, OW, c), p)``: ``ct / (ph * pw)`` into every tap of its
    window, zeros past the last window; each element of ``dx`` written once."""
    _check(dtype, "avg_pool_grad_tiled")
    k = _Kernel((4, 4), 6)
    f = k.f
    _, oh, ow, _ = k.dims[1]
    n, ln = f.begin(k.n1, k.n0)
    _zero_past_windows(k, dtype, n, f.mul(oh, str(ph)), f.mul(ow, str(pw)))
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    crow = k.index(k.dims[1], n, i, j)
    taps = [k.index(k.dims[0], n, f.add(f.mul(i, str(ph)), str(a)),
                    f.add(f.mul(j, str(pw)), str(b))) for a in range(ph) for b in range(pw)]
    count = f.scalar(str(ph * pw), {})
    for ch in range(c):
        share = f.expr.arith("/", f.load("%ct", dtype, f.add(crow, str(ch))), count)
        for t in taps:
            f.store("%dx", dtype, f.add(t, str(ch)), share)
    k.close([(n, ln), (i, li), (j, lj)])
    return f.function(symbol, ["dx", "ct", "p"], noalias=True)


def add_forward(b, out: np.ndarray, x: np.ndarray, p: np.ndarray) -> bool:
    """Adds the tiled forward kernel for ``out = avg_pool2d(x)``; False where it does not
    apply or does not build here (the caller then adds the generic kernel)."""
    if not (usable(p, x.shape, out.shape, x.dtype) and out.flags.c_contiguous):
        return False
    ph, pw, c = int(p[0]), int(p[1]), x.shape[3]
    return native_split(b, f"avg_pool_tiled_{ph}x{pw}c{c}",
                        lambda s, dt: avg_pool_tiled_ir(s, dt, ph, pw, c), (out, x),
                        p.tolist(), out.shape[0])


def add_gradient(b, dx: np.ndarray, ct: np.ndarray, p: np.ndarray) -> bool:
    """Adds the tiled gradient kernel for ``dx = avg_pool2d_grad(ct)`` (at most
    ``avg_pool_max_grad_channels`` channels: options.CpuOptions); False where it does not
    apply or does not build here."""
    if not (usable(p, dx.shape, ct.shape, dx.dtype) and dx.flags.c_contiguous
            and dx.shape[3] <= options.current().avg_pool_max_grad_channels):
        return False
    ph, pw, c = int(p[0]), int(p[1]), dx.shape[3]
    return native_split(b, f"avg_pool_grad_tiled_{ph}x{pw}c{c}",
                        lambda s, dt: avg_pool_grad_tiled_ir(s, dt, ph, pw, c), (dx, ct),
                        p.tolist(), dx.shape[0])
