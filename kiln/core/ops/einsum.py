"""``einsum``: Einstein summation as a composition of existing ops (no op of its own).

Every backend runs it and autodiff differentiates it, because it is built from transpose,
reshape, expand_dims, squeeze, multiply, sum and the batched ``matmul``:

1. the equation is parsed; ``...`` becomes one label per broadcast dimension (right-aligned,
   as in NumPy), an implicit equation (no ``->``) gets NumPy's output (the ellipsis, then the
   letters used once, sorted);
2. per operand: a label repeated inside it takes the diagonal (multiply by an identity matrix,
   sum), a size-1 dimension whose label has another size elsewhere is squeezed (broadcasting,
   as NumPy does), and a label used nowhere else and not in the output is summed out;
3. operands are contracted left to right. A pair with shared summed labels becomes ONE
   batched matmul: ``(batch..., free_a, summed) @ (batch..., summed, free_b)``, each group of
   labels merged into one axis with a reshape; batch labels stay separate leading axes, so
   they broadcast. When a reshape would need two unknown dimensions (kiln reshapes to static
   sizes with at most one -1), the pair is still one matmul, without reshapes: the other free
   labels become broadcast batch axes and the other summed labels batch axes summed after
   the product (more memory by their size). A pair without summed labels is a broadcast
   multiply;
4. the result is transposed to the output order.

Example:
    >>> y = kiln.ops.einsum("btd,dnh->btnh", x, kernel)   # a multi-head projection
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import Node
from kiln.core.ops._rules import as_nodes, broadcast_shapes, fmt
from kiln.core.ops.linalg import matmul
from kiln.core.ops.movement import expand_dims, reshape, squeeze, transpose
from kiln.core.ops.reduce import BUILDERS as _RED
from kiln.core.ops.source import constant

_sum = _RED["sum"]
_ELLIPSIS_BASE = 1000  # labels of broadcast (``...``) dimensions: 1000, 1001, ...


class _Spec:
    """The parsed equation: one label list per operand and the output labels (ints: letters
    are their code points, ``...`` dimensions count from ``_ELLIPSIS_BASE``)."""

    def __init__(self, equation: str, shapes: list[tuple]):
        self.equation = equation
        self.shapes = shapes
        eq = equation.replace(" ", "")
        if eq.count("->") > 1:
            raise self.error("more than one '->'")
        lhs, arrow, rhs = eq.partition("->")
        terms = lhs.split(",")
        if len(terms) != len(shapes):
            raise self.error(f"{len(terms)} input term(s) for {len(shapes)} operand(s)")
        parsed = [self._term(t, what=f"input term {i}") for i, t in enumerate(terms)]
        n_ell = []
        for i, ((letters, has_ell), shape) in enumerate(zip(parsed, shapes)):
            extra = len(shape) - len(letters)
            if extra < 0 or (extra > 0 and not has_ell):
                raise self.error(f"operand {i} has rank {len(shape)} but its term "
                                 f"{terms[i]!r} names {len(letters)} dimension(s)")
            n_ell.append(extra if has_ell else 0)
        self.n_ellipsis = max(n_ell, default=0)
        ell = [_ELLIPSIS_BASE + k for k in range(self.n_ellipsis)]
        self.inputs: list[list[int]] = []
        for (letters, has_ell), term, r in zip(parsed, terms, n_ell):
            if not has_ell:
                self.inputs.append([ord(c) for c in letters])
                continue
            head, _, tail = term.partition("...")
            self.inputs.append([ord(c) for c in head] + ell[self.n_ellipsis - r:] +
                               [ord(c) for c in tail])
        if arrow:
            letters, has_ell = self._term(rhs, what="output term")
            if self.n_ellipsis and not has_ell:
                raise self.error("the operands have '...' dimensions but the output has no "
                                 "'...' to put them in")
            head, _, tail = rhs.partition("...")
            out = [ord(c) for c in head] + (ell if has_ell else []) + [ord(c) for c in tail]
            if len(set(out)) != len(out):
                raise self.error(f"the output term {rhs!r} repeats a label")
            used = {lab for labels in self.inputs for lab in labels}
            missing = [chr(lab) for lab in out if lab not in used]
            if missing:
                raise self.error(f"output label(s) {', '.join(map(repr, missing))} appear in "
                                 "no input term")
        else:  # implicit: the ellipsis, then the letters used exactly once, sorted
            counts: dict[int, int] = {}
            for labels in self.inputs:
                for lab in labels:
                    counts[lab] = counts.get(lab, 0) + 1
            out = ell + sorted(lab for lab, c in counts.items()
                               if c == 1 and lab < _ELLIPSIS_BASE)
        self.output = out

    def _term(self, term: str, what: str) -> tuple[str, bool]:
        has_ell = "..." in term
        if term.count("...") > 1:
            raise self.error(f"{what} {term!r} has more than one '...'")
        letters = term.replace("...", "")
        bad = [c for c in letters if not ("a" <= c <= "z" or "A" <= c <= "Z")]
        if bad:
            raise self.error(f"{what} {term!r} has invalid character(s) {bad} (labels are "
                             "letters a-z, A-Z, and '...')")
        return letters, has_ell

    def error(self, why: str) -> ValueError:
        shapes = ", ".join(fmt(s) for s in self.shapes)
        return ValueError(f"einsum: equation {self.equation!r} with operand shapes {shapes}: "
                          f"{why}")


def _name(label: int) -> str:
    return "..." if label >= _ELLIPSIS_BASE else chr(label)


def _check_sizes(spec: _Spec, nodes: list[Node]) -> dict[int, set[int]]:
    """The known sizes (other than 1) of each label; raises when two differ."""
    sizes: dict[int, set[int]] = {}
    where: dict[int, int] = {}
    for i, (labels, x) in enumerate(zip(spec.inputs, nodes)):
        for lab, d in zip(labels, x.shape):
            if d is None or d == 1:
                continue
            seen = sizes.setdefault(lab, set())
            if seen and d not in seen:
                raise spec.error(f"label {_name(lab)!r} has size {next(iter(seen))} in "
                                 f"operand {where[lab]} and size {d} in operand {i}")
            seen.add(d)
            where.setdefault(lab, i)
    return sizes


def _diagonal(spec: _Spec, x: Node, labels: list[int]) -> tuple[Node, list[int]]:
    """Takes the diagonal for every label repeated inside one operand."""
    while len(set(labels)) != len(labels):
        lab = next(lab for lab in labels if labels.count(lab) > 1)
        i = labels.index(lab)
        j = labels.index(lab, i + 1)
        n = x.shape[i]
        if n is None or x.shape[j] is None:
            raise spec.error(f"the repeated label {_name(lab)!r} needs a known size")
        if x.shape[j] != n:
            raise spec.error(f"the repeated label {_name(lab)!r} has sizes {n} and "
                             f"{x.shape[j]} in one operand")
        rest = [k for k in range(x.ndim) if k not in (i, j)]
        x = transpose(x, rest + [i, j]) * constant(np.eye(n, dtype=x.dtype))
        x = _sum(x, axis=x.ndim - 1)
        labels = [labels[k] for k in rest] + [lab]
    return x, labels


def _sum_out(x: Node, labels: list[int], keep: set[int]) -> tuple[Node, list[int]]:
    axes = [k for k, lab in enumerate(labels) if lab not in keep]
    if axes:
        x = _sum(x, axis=tuple(axes))
        labels = [lab for lab in labels if lab in keep]
    return x, labels


def _permute(x: Node, labels: list[int], order: list[int]) -> Node:
    return transpose(x, [labels.index(lab) for lab in order])


def _static_prod(dims: list) -> int | None:
    if any(d is None for d in dims):
        return None
    return int(np.prod(dims, dtype=np.int64))


def _reshape_target(dims: list) -> list[int] | None:
    """``dims`` with its unknown entry as -1; None when more than one is unknown."""
    if sum(d is None for d in dims) > 1:
        return None
    return [-1 if d is None else int(d) for d in dims]


def _can_merge(shape: list, nb: int, nr: int, nc: int) -> bool:
    """Whether (batch[nb], rows[nr], cols[nc]) can become (batch..., R, C)."""
    return (nr <= 1 and nc <= 1) or _reshape_target(
        shape[:nb] + [_static_prod(shape[nb:nb + nr]), _static_prod(shape[nb + nr:])]) is not None


def _as_matrix(x: Node, nb: int, nr: int, nc: int) -> Node:
    """``x`` (batch[nb], rows[nr], cols[nc]) as (batch..., R, C) (see :func:`_can_merge`)."""
    if nr <= 1 and nc <= 1:
        if nr == 0:
            x = expand_dims(x, nb)
        if nc == 0:
            x = expand_dims(x, x.ndim)
        return x
    shape = list(x.shape)
    return reshape(x, _reshape_target(shape[:nb] + [_static_prod(shape[nb:nb + nr]),
                                                    _static_prod(shape[nb + nr:])]))


def _contract(a: Node, la: list[int], b: Node, lb: list[int], keep: set[int]
              ) -> tuple[Node, list[int]]:
    """Contracts two operands; the result has the labels of either that are in ``keep``
    (returned with it, in the result's axis order)."""
    a, la = _sum_out(a, la, keep | set(lb))
    b, lb = _sum_out(b, lb, keep | set(la))
    batch = [lab for lab in la if lab in lb and lab in keep]
    summed = [lab for lab in la if lab in lb and lab not in keep]
    m = [lab for lab in la if lab not in lb]
    n = [lab for lab in lb if lab not in la]
    out_labels = batch + m + n
    nb, nm, nn_, nk = len(batch), len(m), len(n), len(summed)
    if nk:
        at = _permute(a, la, batch + m + summed)
        bt = _permute(b, lb, batch + summed + n)
        a_shape, b_shape = list(at.shape), list(bt.shape)
        out_dims = (list(broadcast_shapes("einsum", tuple(a_shape[:nb]), tuple(b_shape[:nb]))) +
                    a_shape[nb:nb + nm] + b_shape[nb + nk:])
        if (_can_merge(a_shape, nb, nm, nk) and _can_merge(b_shape, nb, nk, nn_) and
                (nm <= 1 and nn_ <= 1 or _reshape_target(out_dims) is not None)):
            prod = matmul(_as_matrix(at, nb, nm, nk), _as_matrix(bt, nb, nk, nn_))
            if nm <= 1 and nn_ <= 1:
                drop = ([nb] if nm == 0 else []) + ([prod.ndim - 1] if nn_ == 0 else [])
                return (squeeze(prod, drop) if drop else prod), out_labels
            return reshape(prod, _reshape_target(out_dims)), out_labels
        return _matmul_no_reshape(a, la, b, lb, batch, m, summed, n)
    at = _permute(a, la, batch + m)
    bt = _permute(b, lb, batch + n)
    if nn_:
        at = expand_dims(at, tuple(range(nb + nm, nb + nm + nn_)))
    if nm:
        bt = expand_dims(bt, tuple(range(nb, nb + nm)))
    return at * bt, out_labels


def _matmul_no_reshape(a: Node, la: list[int], b: Node, lb: list[int], batch: list[int],
                       m: list[int], summed: list[int], n: list[int]) -> tuple[Node, list[int]]:
    """The contraction as a batched matmul without any reshape (for unknown sizes): one free
    label per side and one summed label form the matrices; the other free labels become
    broadcast batch axes (size 1 in the other operand), the other summed labels batch axes
    that are summed after the product."""
    kc, extra = summed[-1], summed[:-1]
    mx, mm = m[:-1], m[-1:]
    nx, nm = n[:-1], n[-1:]
    nb, ne = len(batch), len(extra)
    at = _permute(a, la, batch + extra + mx + mm + [kc])
    if nx:
        at = expand_dims(at, tuple(range(nb + ne + len(mx), nb + ne + len(mx) + len(nx))))
    if not mm:
        at = expand_dims(at, at.ndim - 1)
    bt = _permute(b, lb, batch + extra + nx + [kc] + nm)
    if mx:
        bt = expand_dims(bt, tuple(range(nb + ne, nb + ne + len(mx))))
    if not nm:
        bt = expand_dims(bt, bt.ndim)
    prod = matmul(at, bt)          # batch + extra + mx + nx + [M | 1] + [N | 1]
    drop = ([prod.ndim - 2] if not mm else []) + ([prod.ndim - 1] if not nm else [])
    if drop:
        prod = squeeze(prod, drop)
    if extra:
        prod = _sum(prod, axis=tuple(range(nb, nb + ne)))
    return prod, batch + mx + nx + mm + nm


def einsum(equation: str, *operands: Any) -> Node:
    """Einstein summation over the operands' labelled axes, with NumPy's semantics.

    Supported: explicit (``"ij,jk->ik"``) and implicit (``"ij,jk"``) equations with letter
    labels, sums over labels missing from the output (contractions of two operands become
    one batched matmul), outer products, transposes and sums of one operand, diagonals
    (``"ii->i"``), ``...`` for broadcast dimensions, and any number of operands (contracted
    left to right). Size-1 dimensions broadcast, as in NumPy.

    Args:
        equation: the subscripts, e.g. ``"btnh,bsnh->bnts"``.
        *operands: tensors (or arrays / numbers, which take the first tensor's dtype).

    Returns:
        The result node.

    Raises:
        ValueError: naming einsum, the equation and the operand shapes, for a malformed
            equation, a rank that does not match its term, or sizes that disagree.

    Example:
        >>> scores = kiln.ops.einsum("btnh,bsnh->bnts", q, k)
    """
    if not isinstance(equation, str):
        raise TypeError(f"einsum: the equation must be a string, received {equation!r}")
    if not operands:
        raise ValueError(f"einsum: equation {equation!r} needs at least one operand")
    nodes = as_nodes("einsum", *operands)
    spec = _Spec(equation, [tuple(x.shape) for x in nodes])
    sizes = _check_sizes(spec, nodes)
    out = spec.output
    xs, labels = [], []
    for x, labs in zip(nodes, spec.inputs):
        x, labs = _diagonal(spec, x, list(labs))
        # broadcasting: a size-1 axis whose label has another size elsewhere is dropped
        ones = [k for k, (lab, d) in enumerate(zip(labs, x.shape)) if d == 1 and sizes.get(lab)]
        if ones:
            x = squeeze(x, ones)
            labs = [lab for k, lab in enumerate(labs) if k not in ones]
        xs.append(x)
        labels.append(labs)
    x, labs = xs[0], labels[0]
    for i in range(1, len(xs)):
        later = {lab for rest in labels[i + 1:] for lab in rest}
        x, labs = _contract(x, labs, xs[i], labels[i], set(out) | later)
    x, labs = _sum_out(x, labs, set(out))
    return _permute(x, labs, out)
