"""``kiln.ops.rearrange``: Keras 3's einops-style axis rearrangement, a reshape (split the
grouped input axes), a transpose and a reshape (merge the grouped output axes). Pure data
movement, so it is symbolic on tensors (one unknown dimension, e.g. the batch, is allowed per
merged group) with the movement ops' gradients, and eager on arrays."""

from __future__ import annotations

import math
import re

from kiln.ops import _G, _dual

_TOKEN = re.compile(r"\(([^()]*)\)|(\w+)|(\S)")


def _parse(side: str, pattern: str) -> list[list[str]]:
    groups = []
    for grouped, name, other in _TOKEN.findall(side):
        if other:
            raise ValueError(f"rearrange: unexpected {other!r} in the pattern {pattern!r} "
                             "(axis names, '(...)' groups and one '->')")
        groups.append(grouped.split() if grouped or not name else [name])
    return groups


def _plan(shape: tuple, pattern: str, axes_lengths: dict):
    if not isinstance(pattern, str) or pattern.count("->") != 1:
        raise ValueError(f"rearrange: the pattern must be a string 'input -> output', received "
                         f"{pattern!r}")
    left, right = (s.strip() for s in pattern.split("->"))
    ins, outs = _parse(left, pattern), _parse(right, pattern)
    if len(ins) != len(shape):
        raise ValueError(f"rearrange: the pattern {pattern!r} names {len(ins)} input axes but "
                         f"the tensor has shape {tuple(shape)} (rank {len(shape)})")
    flat_in = [a for g in ins for a in g]
    flat_out = [a for g in outs for a in g]
    if len(set(flat_in)) != len(flat_in) or sorted(flat_in) != sorted(flat_out):
        raise ValueError(f"rearrange: the input axes {flat_in} and output axes {flat_out} of "
                         f"{pattern!r} must be the same names, each once")
    unknown = set(axes_lengths) - set(flat_in)
    if unknown:
        raise ValueError(f"rearrange: axes_lengths names axes not in {pattern!r}: "
                         f"{sorted(unknown)}")
    sizes: dict[str, int | None] = {}
    for group, dim in zip(ins, shape):
        if len(group) == 1:
            given = axes_lengths.get(group[0])
            if given is not None and dim is not None and int(given) != dim:
                raise ValueError(f"rearrange: axis {group[0]!r} has size {dim}, but "
                                 f"{group[0]}={given} was given")
            sizes[group[0]] = dim if dim is not None else given
            continue
        free = [a for a in group if a not in axes_lengths]
        known = math.prod(int(axes_lengths[a]) for a in group if a in axes_lengths)
        if len(free) > 1:
            raise ValueError(f"rearrange: the group ({' '.join(group)}) of {pattern!r} needs "
                             f"the lengths of all axes but one; missing {free}")
        if dim is not None and (dim % known or not free and dim != known):
            raise ValueError(f"rearrange: the group ({' '.join(group)}) of sizes "
                             f"{ {a: axes_lengths.get(a) for a in group} } does not divide "
                             f"the axis of size {dim}")
        for a in group:
            sizes[a] = int(axes_lengths[a]) if a in axes_lengths else (
                None if dim is None else dim // known)
    return ins, outs, flat_in, flat_out, sizes


def _size(group, sizes):
    vals = [sizes[a] for a in group]
    return None if any(v is None for v in vals) else math.prod(vals)


def _shape(groups, sizes):
    out = [_size(g, sizes) for g in groups]
    if sum(v is None for v in out) > 1:
        raise ValueError(f"rearrange: more than one axis of unknown size in {out}; give their "
                         "lengths as keyword arguments")
    return tuple(-1 if v is None else v for v in out)


def _rearrange(tensor, pattern, **axes_lengths):
    x = _G.as_node(tensor)
    ins, outs, flat_in, flat_out, sizes = _plan(tuple(x.shape), pattern, axes_lengths)
    if any(len(g) != 1 for g in ins):
        x = _G.reshape(x, _shape([[a] for a in flat_in], sizes))
    perm = [flat_in.index(a) for a in flat_out]
    if perm != list(range(len(perm))):
        x = _G.transpose(x, perm)
    if any(len(g) != 1 for g in outs):
        x = _G.reshape(x, _shape(outs, sizes))
    return x


rearrange = _dual(_rearrange, "rearrange")
rearrange.__doc__ = """Rearranges the axes of ``tensor`` by an einops pattern.

    ``"b h w c -> b c h w"`` transposes, ``"b h w c -> (b h) w c"`` merges axes and
    ``"b (h1 h) w c -> (b h1) h w c"`` with ``h1=2`` splits one (``axes_lengths`` give all
    lengths of a split group but one)."""

__all__ = ["rearrange"]
