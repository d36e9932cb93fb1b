"""kiln: Keras-style deep learning on a static graph compiler with JIT-compiled kernels.

Example:
    >>> import kiln
    >>> model = kiln.Sequential([kiln.Input((784,)), kiln.layers.Dense(10, "softmax")])
    >>> model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
"""

from __future__ import annotations

import importlib
from typing import Any

from kiln import config
from kiln.capture import function  # kiln.core.function, and the @kiln.function decorator
from kiln.core import Function, Graph, Node, TensorType, Variable, grad, placeholder
from kiln.foreign import install as _install_foreign

_install_foreign()  # kiln Variables in jax.jit and TensorFlow ops (kiln/foreign.py)

Tensor = Node
KerasTensor = Node  # Keras' name for a symbolic tensor

__version__ = "0.1.0"

# Heavier parts load on first use, so that `import kiln` stays fast and the core stays usable
# on its own.
_LAZY_MODULES = {"ops", "layers", "models", "optimizers", "callbacks", "losses", "metrics",
                 "activations", "initializers", "regularizers", "saving", "datasets", "utils",
                 "distribution", "export", "random", "constraints", "preprocessing",
                 "backend", "applications"}
_LAZY_ATTRS = {
    "Input": ("kiln.layers", "Input"),
    "Sequential": ("kiln.models", "Sequential"),
    "Model": ("kiln.models", "Model"),
    "load_model": ("kiln.models", "load_model"),
    "GradientTape": ("kiln.models.custom_steps", "GradientTape"),
    # Keras' top-level base classes
    "Layer": ("kiln.layers", "Layer"),
    "Loss": ("kiln.losses", "Loss"),
    "Metric": ("kiln.metrics", "Metric"),
    "Optimizer": ("kiln.optimizers", "Optimizer"),
    "Initializer": ("kiln.initializers", "Initializer"),
    "Regularizer": ("kiln.regularizers", "Regularizer"),
    "Constraint": ("kiln.constraints", "Constraint"),
    "InputSpec": ("kiln.layers", "InputSpec"),
    "DTypePolicy": ("kiln.config", "DTypePolicy"),
    "FloatDTypePolicy": ("kiln.config", "FloatDTypePolicy"),
    # Keras' top-level helpers, as far as they mean something in kiln (kiln/scopes.py)
    "device": ("kiln.scopes", "device"),
    "name_scope": ("kiln.scopes", "name_scope"),
    "remat": ("kiln.scopes", "remat"),
    "RematScope": ("kiln.scopes", "RematScope"),
    "StatelessScope": ("kiln.scopes", "StatelessScope"),
    "SymbolicScope": ("kiln.scopes", "SymbolicScope"),
    "Operation": ("kiln.scopes", "Operation"),
    "Quantizer": ("kiln.scopes", "Quantizer"),
    "version": ("kiln.scopes", "version"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        return importlib.import_module(f"kiln.{name}")
    if name in _LAZY_ATTRS:
        module, attr = _LAZY_ATTRS[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")


__all__ = ["config", "Function", "Variable", "function", "grad", "placeholder", "Graph", "Node",
           "Tensor", "KerasTensor", "TensorType", *sorted(_LAZY_MODULES), *sorted(_LAZY_ATTRS)]
