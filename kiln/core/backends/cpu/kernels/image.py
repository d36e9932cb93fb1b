"""Image kernels: ``resize`` / ``resize_grad`` (separable, two taps per axis from
``kiln.core.ops.image.resize_taps``) and ``affine_transform`` / ``affine_transform_grad``
(one sampling loop per output pixel; the semantics are in ``kiln/core/ops/image.py``).

The affine kernels are generated source: the index fix of each fill mode is written out inline
for each of the four taps (a numba kernel cannot call a plain Python helper), so the loop is
one function the JIT loader caches like any other.
"""

from __future__ import annotations

from kiln.core.backends.cpu.codegen import jit
from kiln.core.backends.cpu.registry import builder
from kiln.core.ir import Node
from kiln.core.ops.image import FILL_MODES, INTERPOLATIONS, resize_taps


def resize_kernel(o, x, ylo, yhi, wy, xlo, xhi, wx):
    n_b, oh, ow, n_c = o.shape
    for b in range(n_b):
        for i in range(oh):
            y0 = ylo[i]
            y1 = yhi[i]
            v = wy[i]
            for j in range(ow):
                x0 = xlo[j]
                x1 = xhi[j]
                u = wx[j]
                w00 = (1.0 - v) * (1.0 - u)
                w01 = (1.0 - v) * u
                w10 = v * (1.0 - u)
                w11 = v * u
                for c in range(n_c):
                    o[b, i, j, c] = (w00 * x[b, y0, x0, c] + w01 * x[b, y0, x1, c]
                                     + w10 * x[b, y1, x0, c] + w11 * x[b, y1, x1, c])


def resize_grad_kernel(o, ct, ylo, yhi, wy, xlo, xhi, wx):
    n_b, h, w, n_c = o.shape
    oh = ct.shape[1]
    ow = ct.shape[2]
    for b in range(n_b):
        for i in range(h):
            for j in range(w):
                for c in range(n_c):
                    o[b, i, j, c] = 0
    for b in range(n_b):
        for i in range(oh):
            y0 = ylo[i]
            y1 = yhi[i]
            v = wy[i]
            for j in range(ow):
                x0 = xlo[j]
                x1 = xhi[j]
                u = wx[j]
                w00 = (1.0 - v) * (1.0 - u)
                w01 = (1.0 - v) * u
                w10 = v * (1.0 - u)
                w11 = v * u
                for c in range(n_c):
                    g = ct[b, i, j, c]
                    o[b, y0, x0, c] += w00 * g
                    o[b, y0, x1, c] += w01 * g
                    o[b, y1, x0, c] += w10 * g
                    o[b, y1, x1, c] += w11 * g


def _taps(b, node: Node, in_node: Node, out_hw: tuple) -> tuple:
    h, w = b.shape(in_node)[1:3]
    interp = node.attrs["interpolation"]
    return resize_taps(h, out_hw[0], interp) + resize_taps(w, out_hw[1], interp)


@builder("resize")
def build_resize(b, node: Node) -> None:
    (x_node,) = node.inputs
    args = (b.out(node), b.contiguous(x_node)) + _taps(b, node, x_node, b.shape(node)[1:3])
    b.add(jit.load_function(resize_kernel).specialize(args), args)


@builder("resize_grad")
def build_resize_grad(b, node: Node) -> None:
    ct_node, x_node = node.inputs
    args = (b.out(node), b.contiguous(ct_node)) + _taps(b, node, x_node,
                                                         b.shape(ct_node)[1:3])
    b.add(jit.load_function(resize_grad_kernel).specialize(args), args)


# ---- affine_transform: generated source ------------------------------------------------
def _fix(i: str, n: str, mode: str) -> list[str]:
    """Lines fixing index ``i`` into ``[0, n)`` for ``mode`` (``map_coordinates``' fixers);
    ``constant`` leaves it (the caller checks validity)."""
    if mode == "nearest":
        return [f"{i} = min(max({i}, 0), {n} - 1)"]
    if mode == "wrap":
        return [f"{i} = {i} % {n}"]
    if mode == "mirror":
        return [f"if {n} == 1:", f"    {i} = 0", "else:",
                f"    {i} = abs(({i} + {n} - 1) % (2 * {n} - 2) - ({n} - 1))"]
    if mode == "reflect":
        return [f"{i} = (abs((2 * {i} + 1 + 2 * {n}) % (4 * {n}) - 2 * {n}) - 1) // 2"]
    return []


def _coord_lines(name: str, coord: str, size: str, interp: str, mode: str) -> list[str]:
    """Lines computing the two taps ``{name}0, {name}1`` (indices), their weights
    ``{name}w0, {name}w1`` and validity ``{name}v0, {name}v1`` of a coordinate."""
    lines = [f"if not ({coord} > -1e9):", f"    {coord} = -1e9",
             f"if {coord} > 1e9:", f"    {coord} = 1e9"]
    if interp == "nearest":
        lines += [f"{name}0 = int(math.floor(abs({coord}) + 0.5))",
                  f"if {coord} < 0:", f"    {name}0 = -{name}0",
                  f"{name}w0 = 1.0", f"{name}w1 = 0.0"]
    else:
        lines += [f"fl = math.floor({coord})", f"{name}0 = int(fl)",
                  f"{name}w1 = {coord} - fl", f"{name}w0 = 1.0 - {name}w1"]
    lines.append(f"{name}1 = {name}0 + 1")
    for k in "01":
        lines += _fix(f"{name}{k}", size, mode)
        lines.append(f"{name}v{k} = {name}{k} >= 0 and {name}{k} < {size}")
    return lines


def affine_source(interp: str, mode: str, grad: bool) -> str:
    """The source of the affine kernel (``grad``: the scatter of a cotangent)."""
    name = "affine_grad_kernel" if grad else "affine_kernel"
    head = (f"def {name}(o, x, tr):\n" if grad else f"def {name}(o, x, tr, fill_value):\n")
    body = ["n_b, h, w, n_c = o.shape" if grad else "n_b, h, w, n_c = x.shape",
            "n_t = tr.shape[0]"]
    if grad:
        body += ["for b in range(n_b):", "    for i in range(h):", "        for j in range(w):",
                 "            for c in range(n_c):", "                o[b, i, j, c] = 0"]
    body += ["for b in range(n_b):",
             "    t = b if n_t > 1 else 0",
             ] + [f"    {n} = float(tr[t, {k}])" for k, n in enumerate(
                  ("a0", "a1", "a2", "b0", "b1", "b2", "c0", "c1"))] + [
             "    for i in range(h):", "        for j in range(w):",
             "            k = c0 * j + c1 * i + 1.0",
             "            ys = (b0 * j + b1 * i + b2) / k",
             "            xs = (a0 * j + a1 * i + a2) / k"]
    inner = _coord_lines("y", "ys", "h", interp, mode) + _coord_lines("x", "xs", "w", interp,
                                                                        mode)
    taps = [("y0", "x0", "yw0 * xw0", "yv0 and xv0"), ("y0", "x1", "yw0 * xw1", "yv0 and xv1"),
            ("y1", "x0", "yw1 * xw0", "yv1 and xv0"), ("y1", "x1", "yw1 * xw1", "yv1 and xv1")]
    if grad:
        for yi, xi, wt, valid in taps:
            inner += [f"wt = {wt}", f"if wt != 0.0 and {valid}:", "    for c in range(n_c):",
                      f"        o[b, {yi}, {xi}, c] += wt * x[b, i, j, c]"]
    else:
        inner += ["for c in range(n_c):", "    acc = 0.0"]
        for yi, xi, wt, valid in taps:
            inner += [f"    wt = {wt}", "    if wt != 0.0:", f"        if {valid}:",
                      f"            acc += wt * x[b, {yi}, {xi}, c]", "        else:",
                      "            acc += wt * fill_value"]
        inner += ["    o[b, i, j, c] = acc"]
    lines = ["    " + s for s in body] + ["                " + s for s in inner]
    return head + "\n".join(lines) + "\n"


def _affine_kernel(interp: str, mode: str, grad: bool) -> jit.Kernel:
    if interp not in INTERPOLATIONS or mode not in FILL_MODES:
        raise ValueError(f"affine_transform: unknown interpolation {interp!r} or fill_mode "
                         f"{mode!r}")
    name = "affine_grad_kernel" if grad else "affine_kernel"
    return jit.load(affine_source(interp, mode, grad), name,
                    signature=f"image.{name}:{interp}:{mode}")


def _check_rows(b, x_node: Node, t_node: Node) -> None:
    """The transforms' rows must be 1 or one per image (the kernel reads row ``b``)."""
    n_b, n_t = b.shape(x_node)[0], b.shape(t_node)[0]
    if n_t not in (1, n_b):
        raise ValueError(f"affine_transform: {n_t} transform rows for {n_b} images (expected "
                         "1 or one per image)")


@builder("affine_transform")
def build_affine(b, node: Node) -> None:
    x_node, t_node = node.inputs
    _check_rows(b, x_node, t_node)
    a = node.attrs
    tr = b.contiguous(t_node)
    args = (b.out(node), b.contiguous(x_node), tr, float(a["fill_value"]))
    kernel = _affine_kernel(a["interpolation"], a["fill_mode"], grad=False)
    b.add(kernel.specialize(args), args)


@builder("affine_transform_grad")
def build_affine_grad(b, node: Node) -> None:
    ct_node, t_node, _ = node.inputs
    _check_rows(b, ct_node, t_node)
    a = node.attrs
    args = (b.out(node), b.contiguous(ct_node), b.contiguous(t_node))
    kernel = _affine_kernel(a["interpolation"], a["fill_mode"], grad=True)
    b.add(kernel.specialize(args), args)

