"""``Optimizer.apply`` / ``apply_gradients``: NumPy gradients (a compiled update, cached per
variable list) or, inside a traced step, symbolic ones (the update joins the step; see
``kiln/models/custom_steps.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.core import Variable, convert_to_tensor, function, is_tensor, placeholder
from kiln.layers import context as trace_context


class ApplyMixin:
    """The ``apply`` methods of :class:`kiln.optimizers.Optimizer` (it provides ``build``,
    ``update_nodes``, ``before_step``, ``iterations`` and the compiled-update cache)."""

    # ---- Python-side conveniences ----------------------------------------------------------
    def apply_gradients(self, grads_and_vars: Any, backend: str | None = None) -> Variable:
        """Applies NumPy gradients: the same graph update, compiled once per variable list.

        Args:
            grads_and_vars: iterable of ``(gradient array, Variable)`` pairs.
            backend: backend for the compiled update (default: kiln's default backend).

        Returns:
            ``iterations``.

        Example:
            >>> opt.apply_gradients([(np.ones((3, 2)), w)])
        """
        pairs = list(grads_and_vars)
        if not pairs:
            return self.iterations
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        return self.apply(grads, variables, backend=backend)

    def apply(self, grads: Sequence[Any], trainable_variables: Sequence[Variable] | None = None,
              backend: str | None = None) -> Variable:
        """Like :meth:`apply_gradients` with separate lists (Keras's ``apply``); without
        variables, the ones the optimizer was built with."""
        if trainable_variables is None:
            if not self.built:
                raise ValueError(f"{type(self).__name__}.apply: pass the variables, or build "
                                 "the optimizer first")
            trainable_variables = self._trainable_variables
        variables = list(trainable_variables)
        grads = list(grads)
        if len(grads) != len(variables):
            raise ValueError(f"{type(self).__name__}.apply: received {len(grads)} gradients "
                             f"for {len(variables)} variables")
        if any(is_tensor(g) for g in grads):
            return self._apply_symbolic(grads, variables)
        present = tuple(g is not None for g in grads)
        key = (tuple(id(v) for v in variables), present, backend)
        fn = self._compiled.get(key)
        if fn is None:
            phs = [placeholder(v.shape, v.dtype, name=f"grad_{v.name}")
                   for v, p in zip(variables, present) if p]
            it = iter(phs)
            gnodes = [next(it) if p else None for p in present]
            fn = function(phs, [], updates=self.update_nodes(gnodes, variables),
                          backend=backend, name=f"{self.name}.apply")
            self._compiled[key] = fn
        self.before_step()
        feeds = [np.asarray(g, dtype=v.dtype) for g, v in zip(grads, variables) if g is not None]
        fn(*feeds)
        return self.iterations

    def _apply_symbolic(self, grads: list, variables: list[Variable]) -> Variable:
        """``apply`` inside a traced step (a custom ``train_step``): the update becomes part of
        the compiled step. Each Variable's update is recorded with ``Variable.assign`` (later
        reads in the same step see the new value); the trainer calls :meth:`before_step`
        before every run."""
        ctx = trace_context.current()
        if ctx is None:
            raise ValueError(f"{type(self).__name__}.apply: symbolic gradients outside a traced "
                             "step (a train_step traced by fit); pass NumPy gradients")
        for v in variables:
            if not isinstance(v, Variable):
                raise TypeError(f"{type(self).__name__}.apply: expected kiln.Variable objects, "
                                f"received {type(v).__name__}")
        self.build(variables)
        grads = [None if g is None else convert_to_tensor(g) for g in grads]
        for var, node in self.update_nodes(grads, variables):
            var.assign(node)
        if all(o is not self for o in ctx.optimizers):
            ctx.optimizers.append(self)
        return self.iterations
