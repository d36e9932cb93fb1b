"""kiln computations inside ``jax.grad``: what Keras' JAX-style ``train_step(self, state,
data)`` needs (``jax.value_and_grad(self.compute_loss_and_updates)``).

JAX cannot trace kiln, so kiln's stateless entry points (``stateless_call``,
``stateless_compute_loss``, a ``Loss`` called on JAX values) hand JAX a black box with its
own derivative, when they receive JAX tracers: a ``jax.custom_vjp`` function whose forward
runs kiln's compiled graph of the computation (``jax.pure_callback``: on the host, with the
given variable values swapped in, ``kiln.layers.stateless``) and whose backward runs kiln's
compiled vector-Jacobian product of the same graph (``kiln.grad`` with the cotangents as
seed). Both use one random key per call, so a training call's dropout draws the same mask
in both. The graphs are traced with static shapes and cached on the owner per signature.

jax is never imported here unless a JAX value arrived (``sys.modules`` is checked).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import kiln.config
import kiln.ops as K
from kiln.core import Node, Variable, function, grad, placeholder, trace_variables
from kiln.layers.context import trace


def has_tracer(*values: Any) -> bool:
    """Whether a (nested) value is a JAX tracer (inside ``jax.grad``, ``jax.jit`` ...)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    from kiln.layers.base import flatten
    tracer = jax.core.Tracer
    return any(isinstance(v, tracer) for v in flatten(list(values)))


def host_call(fn: Callable, args: Any, out_specs: Sequence[tuple]) -> list:
    """``fn(*args)`` (NumPy in, a list of arrays out) inside a JAX trace (``jax.jit``): a
    ``jax.pure_callback`` whose results have ``out_specs`` (``(shape, dtype)`` pairs). For
    the stateless APIs that are not differentiated (``optimizer.stateless_apply``,
    ``metric.stateless_update_state``): Keras' JAX guides jit whole steps around them."""
    import jax

    # int64/float64 (an optimizer's iterations) as JAX holds them without jax_enable_x64
    specs = [(tuple(int(d) for d in s), np.dtype(jax.dtypes.canonicalize_dtype(np.dtype(d))))
             for s, d in out_specs]

    def run(*a: Any) -> list:
        return [np.asarray(o, dtype=d).reshape(s) for o, (s, d) in zip(fn(*a), specs)]
    # not differentiated (a metric's state inside jax.value_and_grad's has_aux function):
    # constant inputs, so that JAX never asks the callback for a JVP
    args = jax.tree_util.tree_map(jax.lax.stop_gradient, args)
    return list(jax.pure_callback(run, [jax.ShapeDtypeStruct(s, d) for s, d in specs],
                                  *args))


def _dtype(a: Any, floatx: str) -> str:
    kind = np.dtype(a.dtype).kind
    if kind == "f":
        return floatx
    if kind == "b":
        return "bool"
    return "int64" if np.dtype(a.dtype).itemsize > 4 else "int32"


class _Graphs:
    """The compiled forward and VJP of one signature."""

    def __init__(self, build: Callable, variables: list[Variable], arrays: list,
                 floatx: str, training: bool):
        self.variables = variables
        self.dtypes = [_dtype(a, floatx) for a in arrays]
        phs = [placeholder(tuple(a.shape), d) for a, d in zip(arrays, self.dtypes)]
        key = placeholder((2,), "int64", name="rng_key")
        with trace(training=training, rng_key=key) as ctx, trace_variables() as assigned:
            diff, aux, self.meta = build(phs)
        updates = {id(v): n for v, n in list(ctx.updates) + list(assigned.update_list())}
        diff = [K.convert_to_tensor(d) if not isinstance(d, Node) else d for d in diff]
        self.n_aux = len(aux)
        self.updated = [i for i, v in enumerate(aux) if id(v) in updates]
        aux_nodes = [updates[id(aux[i])] for i in self.updated]
        self.out_specs = [(tuple(n.shape), n.dtype) for n in diff + aux_nodes]
        self.n_diff = len(diff)
        self.fwd = function(phs + [key], diff + aux_nodes, name="jax_forward")
        self.float_inputs = [i for i, d in enumerate(self.dtypes) if d == floatx]
        cts = [placeholder(n.shape, n.dtype) for n in diff]
        self.ct_dtypes = [n.dtype for n in diff]
        target = None
        for n, c in zip(diff, cts):
            term = K.sum(n * c) if n.dtype == c.dtype and n.dtype.startswith("float") else None
            if term is not None:
                target = term if target is None else target + term
        wrt = list(variables) + [phs[i] for i in self.float_inputs]
        grads = grad(target, wrt) if target is not None and wrt else []
        self.bwd = function(phs + [key] + cts, grads, name="jax_vjp") if grads else None


def bridged(owner: Any, key: Any, build: Callable, variables: Sequence[Variable],
            values: Sequence[Any], arrays: Sequence[Any], training: bool = False
            ) -> tuple[list, list, Any]:
    """``build``'s outputs as JAX values, differentiable by JAX w.r.t. ``values`` (the values
    of ``variables``) and the float ``arrays`` (see the module docstring).

    Args:
        owner: whose cache holds the compiled graphs.
        key: what identifies ``build`` (with the shapes of the arrays).
        build: ``placeholders -> (differentiable nodes, aux Variables, meta)``, traced once:
            the aux Variables' new values (after the updates the call records) are returned
            too, and ``meta`` (what the caller needs to rebuild its result) as it is.
        variables, values: Variables and the (JAX) values to compute with.
        arrays: the inputs of the placeholders (JAX or NumPy arrays).

    Returns:
        ``(differentiable outputs, [new value or None per aux Variable], meta)``.
    """
    import jax

    from kiln.layers.stateless import swapped
    from kiln.random_state import next_seed
    variables, values, arrays = list(variables), list(values), list(arrays)
    floatx = kiln.config.floatx()
    sig = (key, training, tuple((tuple(a.shape), str(a.dtype)) for a in arrays))
    cache = owner.__dict__.setdefault("_jax_bridges", {})
    graphs = cache.get(sig)
    if graphs is None:
        graphs = cache[sig] = _Graphs(build, variables, arrays, floatx, training)
    seed = np.array([next_seed(), 0], np.int64)
    who = f"{getattr(owner, 'name', type(owner).__name__)} (inside jax.grad)"

    def host(fn: Any, vals: Any, arrs: Any, extra: Any = ()) -> list:
        feeds = [np.asarray(a, d) for a, d in zip(arrs, graphs.dtypes)] + [seed] + [
            np.zeros(np.shape(c), d) if np.asarray(c).dtype.kind == "V"  # float0: an int output
            else np.asarray(c, d) for c, d in zip(extra, graphs.ct_dtypes)]
        with swapped(variables, [np.asarray(v) for v in vals], who, "variables"):
            out = fn(*feeds)
        return out if isinstance(out, list) else [out]

    def canon(shape: tuple, dtype: str) -> Any:
        return jax.ShapeDtypeStruct(shape, jax.dtypes.canonicalize_dtype(dtype))

    out_shapes = [canon(s, d) for s, d in graphs.out_specs]

    def forward(vals: list, arrs: list) -> list:
        def run(v: Any, a: Any) -> list:
            return [np.asarray(o).astype(s.dtype) for o, s in
                    zip(host(graphs.fwd, v, a), out_shapes)]
        return jax.pure_callback(run, out_shapes, vals, arrs)

    @jax.custom_vjp
    def f(vals: list, arrs: list) -> list:
        return forward(vals, arrs)

    def f_fwd(vals: list, arrs: list) -> tuple:
        return forward(vals, arrs), (vals, arrs)

    def f_bwd(res: tuple, cts: list) -> tuple:
        vals, arrs = res
        grad_shapes = [canon(tuple(v.shape), str(v.dtype)) for v in vals] + [
            canon(tuple(arrs[i].shape), str(arrs[i].dtype)) for i in graphs.float_inputs]
        if graphs.bwd is None:
            grads = [np.zeros(s.shape, s.dtype) for s in grad_shapes]
        else:
            def run(v: Any, a: Any, c: Any) -> list:
                return [np.asarray(g).astype(s.dtype) for g, s in
                        zip(host(graphs.bwd, v, a, c), grad_shapes)]
            grads = jax.pure_callback(run, grad_shapes, vals, arrs, list(cts[:graphs.n_diff]))
        g_vals = list(grads[:len(vals)])
        g_float = iter(grads[len(vals):])
        g_arrs = [next(g_float) if i in graphs.float_inputs else
                  np.zeros(np.shape(a), jax.dtypes.float0) for i, a in enumerate(arrs)]
        return g_vals, g_arrs

    f.defvjp(f_fwd, f_bwd)
    outs = f(values, [a if has_tracer(a) else np.asarray(a) for a in arrays])
    diff = list(outs[:graphs.n_diff])
    new_aux: list = [None] * graphs.n_aux
    for i, o in zip(graphs.updated, outs[graphs.n_diff:]):
        new_aux[i] = o
    return diff, new_aux, graphs.meta


__all__ = ["bridged", "has_tracer"]
