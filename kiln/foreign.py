"""kiln values given to JAX and TensorFlow.

TensorFlow: a kiln Variable converts to its current value (``tf.reduce_sum(variable)``), except
inside a layer's ``call()`` or a traced step, where it stands for a graph node: there the error
names the TensorFlow call and its ``kiln.ops`` equivalent.

JAX: kiln Variables as pytrees: ``jax.jit(train_step)(state)`` with ``state`` holding
``model.trainable_variables`` (keras.io's "Writing a training loop from scratch in JAX").

Recent JAX (0.10 here) no longer reads ``__jax_array__`` while it abstracts a jitted function's
arguments, so a Variable among them is refused. Registered as a pytree node whose one leaf is
its current value, a Variable enters ``jax.jit``/``jax.grad``/``jax.tree_util.tree_map`` as that
value, and comes out as an array: the function sees values, not objects, as with the state
Keras' JAX backend passes around (the guide writes the arrays back with ``variable.assign``).

A symbolic kiln tensor given to a jax function (``jax.numpy.sum(inputs)`` inside a layer's
``call()``) gets kiln's error naming the call and its ``kiln.ops`` equivalent.

jax is never imported here: the registration runs when kiln is imported after jax, or right
after ``import jax`` when kiln came first (a one-shot import hook).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any

from kiln.core import Node, Variable

_TYPES: list[type] = [Variable]  # Variable and its subclasses that travel as values
_registered: set[type] = set()


def _flatten(v: Variable) -> tuple[tuple[Any], None]:
    return (v.value,), None


def _unflatten(_aux: None, children: Any) -> Any:
    # the value itself, not a new Variable: traced code receives arrays (tracers)
    return tuple(children)[0]


def _refuse_node(node: Node) -> Any:
    # a jax function given a symbolic kiln tensor (``jnp.sum(inputs)`` in a layer's call()):
    # the error names the jax call and the kiln.ops equivalent, as for TensorFlow's ops
    getattr(Node, "__array__")(node)  # noqa: B009 (attached by kiln.core.ops)


def register() -> bool:
    """Registers the Variable types with the loaded jax; returns whether jax is loaded."""
    jax = sys.modules.get("jax")
    if jax is None or not hasattr(jax, "tree_util"):
        return False
    for cls in _TYPES:
        if cls not in _registered:
            try:
                jax.tree_util.register_pytree_node(cls, _flatten, _unflatten)
            except ValueError:  # registered already (kiln reloaded)
                pass
            _registered.add(cls)
    if Node not in _registered:
        try:
            jax.tree_util.register_pytree_node(Node, _refuse_node, _unflatten)
        except ValueError:
            pass
        _registered.add(Node)
    return True


def register_type(cls: type) -> None:
    """Makes a Variable subclass travel as its value too (JAX's registry is by exact type)."""
    _TYPES.append(cls)
    register()


def _in_layer_call() -> bool:
    """Whether a layer's ``call`` or a traced step is running (kiln traces both: a Variable
    there stands for its graph node, not for its current value)."""
    context = sys.modules.get("kiln.layers.context")
    if context is not None and context.current() is not None:
        return True
    frame: Any = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "__call__" and \
                frame.f_code.co_filename.replace("\\", "/").endswith("kiln/layers/base.py"):
            return True
        frame = frame.f_back
    return False


def _variable_tf_tensor(self: Variable, dtype: Any = None, name: Any = None) -> Any:
    """TensorFlow's conversion of a kiln Variable (``tf.convert_to_tensor``, any tf op): its
    current value outside layers; inside a layer's call() or a traced step the error names the
    TensorFlow call and its kiln.ops equivalent, since TensorFlow would freeze the value there
    as a constant (no gradient reaches the weight, updates are never seen)."""
    if _in_layer_call():
        getattr(Node, "__tf_tensor__")(self.__kiln_node__(), dtype, name)  # noqa: B009  # raises the named error
    return sys.modules["tensorflow"].convert_to_tensor(self.value, dtype=dtype, name=name)


Variable.__tf_tensor__ = _variable_tf_tensor  # type: ignore[attr-defined]


class _AfterJaxImport(importlib.abc.MetaPathFinder):
    """Runs :func:`register` once ``import jax`` has executed jax's ``__init__``."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "jax":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, run = spec.loader, spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            register()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Registers now if jax is loaded, else when it is imported."""
    if not register() and not any(isinstance(f, _AfterJaxImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterJaxImport())
