"""EinsumDense: a dense layer as an einsum equation (Keras 3's names, arguments, defaults and
weight layout), the projections of MultiHeadAttention."""

from __future__ import annotations

import re
from typing import Any

import kiln.ops as K
from kiln import activations, initializers, regularizers
from kiln.core import Node, format_shape
from kiln.layers._utils import (
    add_activity_loss,
    constraint_config,
    drop_keras_extras,
    set_constraints,
)
from kiln.layers.base import Layer


def _err(layer: Layer, why: str) -> ValueError:
    return ValueError(f"Layer '{layer.name}' ({type(layer).__name__}): {why}")


_INITS = ("kernel_initializer", "bias_initializer")
_REGS = ("kernel_regularizer", "bias_regularizer", "activity_regularizer")


def _init_weight_args(layer: Layer, args: dict) -> None:
    """Sets the kernel/bias initializers and regularizers from the constructor's locals."""
    set_constraints(layer, kernel_constraint=args["kernel_constraint"],
                    bias_constraint=args["bias_constraint"])
    for name in _INITS + _REGS:
        setattr(layer, name, (initializers if name in _INITS else regularizers).get(args[name]))


def _serialized(layer: Any) -> dict:
    return {**{n: initializers.serialize(getattr(layer, n)) for n in _INITS},
            **{n: regularizers.serialize(getattr(layer, n)) for n in _REGS},
            **constraint_config(layer, "kernel_constraint", "bias_constraint")}


def analyze_einsum(who: str, equation: str, bias_axes: str | None, input_shape: tuple,
                   partial_output: tuple) -> tuple[list, list | None, list]:
    """Keras' EinsumDense shape rule: ``(kernel_shape, bias_shape, full_output_shape)``."""
    eq = equation.replace(" ", "").replace("...", "0")
    forms = {"": r"(X+),(X+)->(X+)", "left": r"0(X+),(X+)->0(X+)", "right": r"(X{2,})0,(X+)->(X+)0"}
    side, match = next(((k, m) for k, p in forms.items()
                        if (m := re.fullmatch(p.replace("X", "[a-zA-Z]"), eq))), ("", None))
    left, right = side == "left", side == "right"
    if match is None:
        raise ValueError(f"{who}: invalid einsum equation {equation!r}; equations must be in "
                         "the form [X],[Y]->[Z], ...[X],[Y]->...[Z], or [X]...,[Y]->[Z]...")
    in_spec, w_spec, out_spec = match.groups()
    elided = len(input_shape) - len(in_spec)
    if elided < 0 or (elided and not (left or right)):
        raise ValueError(f"{who}: equation {equation!r} expects inputs of rank "
                         f"{len(in_spec)}, received input shape {format_shape(input_shape)}")
    out = [input_shape[0]] + list(partial_output)
    if left:
        out[1:1] = list(input_shape[1:elided])
    elif right:
        out += list(input_shape[len(input_shape) - elided:])
    if len(out) != len(out_spec) + elided:
        raise ValueError(f"{who}: output_shape {tuple(partial_output)} has {len(partial_output)} "
                         f"entries; {equation!r} needs {len(out_spec) - (not left)} (no batch, "
                         "no '...' dimensions)")
    shift = elided if left else 0
    in_map = {c: (i + elided - len(input_shape) if left else i) for i, c in enumerate(in_spec)}
    out_map = {c: i + shift for i, c in enumerate(out_spec)}
    for c in (c for c in in_spec if c in out_map):
        have, got = input_shape[in_map[c]], out[out_map[c]]
        if got is not None and have is not None and got != have:
            raise ValueError(f"{who}: input {format_shape(input_shape)} and output_shape "
                             f"disagree on dimension '{c}' ({have} vs {got})")
        out[out_map[c]] = have if got is None else got
    for c in out_spec:
        if c not in in_spec and c not in w_spec:
            raise ValueError(f"{who}: output dimension '{c}' of {equation!r} is in neither the "
                             "input nor the kernel")
    kernel = [input_shape[in_map[c]] if c in in_map else out[out_map[c]] if c in out_map else -1
              for c in w_spec]
    if -1 in kernel or None in kernel:
        c = w_spec[kernel.index(-1 if -1 in kernel else None)]
        raise ValueError(f"{who}: kernel dimension '{c}' of {equation!r} is " + (
            "in neither the input nor the output" if -1 in kernel else
            f"unknown for input {format_shape(input_shape)}; give it in output_shape"))
    if not bias_axes:
        return kernel, None, out
    if any(c not in out_spec for c in bias_axes):
        raise ValueError(f"{who}: bias_axes {bias_axes!r} names axes that are not in the output "
                         f"spec {out_spec!r}")
    first = min(out_spec.index(c) for c in bias_axes)
    bias = [out[i + shift] if c in bias_axes else 1 for i, c in enumerate(out_spec) if i >= first]
    if None in bias:
        raise ValueError(f"{who}: a bias dimension of {bias_axes!r} is unknown")
    return kernel, bias + ([] if left else [1] * elided), out


class EinsumDense(Layer):
    """``activation(einsum(equation, inputs, kernel) + bias)``: a dense layer with a kernel
    of any rank. Weights (Keras' shapes): ``kernel``, and ``bias`` over the output axes from
    the first bias axis to the end (1 on the axes without a bias).

    Args:
        equation: ``"[X],[Y]->[Z]"``, ``"...[X],[Y]->...[Z]"`` or ``"[X]...,[Y]->[Z]..."``
            (input, kernel, output), e.g. ``"abc,cde->abde"``.
        output_shape: the output shape without the batch and ``...`` dimensions (an int for
            one); ``None`` entries come from the input.
        activation: default none. bias_axes: the output letters with a bias, or None.
        kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
        activity_regularizer: as Dense's; kernel_constraint, bias_constraint: optional constraints.

    Example:
        >>> dense = kiln.layers.EinsumDense("abc,cd->abd", (None, 64), bias_axes="d")
        >>> y = dense(kiln.Input((32, 128)))          # (None, 32, 64)
    """

    def __init__(self, equation: str, output_shape: Any, activation: Any = None,
                 bias_axes: str | None = None, kernel_initializer: Any = "glorot_uniform",
                 bias_initializer: Any = "zeros", kernel_regularizer: Any = None,
                 bias_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, lora_rank: int | None = None,
                 lora_alpha: float | None = None, gptq_unpacked_column_size: Any = None,
                 quantization_config: Any = None, *, activity_regularizer: Any = None,
                 **kwargs: Any):
        drop_keras_extras("EinsumDense", {
            "lora_rank": lora_rank, "lora_alpha": lora_alpha, "quantization_config":
            quantization_config, "gptq_unpacked_column_size": gptq_unpacked_column_size})
        super().__init__(**kwargs)
        _init_weight_args(self, locals())
        self.equation = str(equation)
        self.partial_output_shape = ((int(output_shape),) if isinstance(output_shape, int)
                                     else tuple(None if d is None else int(d)
                                                for d in output_shape))
        self.bias_axes = bias_axes or None
        self.activation = activations.get(activation)

    def _weight_shapes(self, input_shape: tuple) -> tuple:
        kernel, bias, _ = analyze_einsum(f"Layer '{self.name}' (EinsumDense)", self.equation,
                                         self.bias_axes, input_shape, self.partial_output_shape)
        return tuple(kernel), None if bias is None else tuple(bias)

    def _check_inputs(self, inputs: Any) -> None:
        """A built layer takes inputs of its rank whose sizes give the same weight shapes."""
        if not (isinstance(inputs, Node) and self.built):
            return
        want = tuple(self.build_input_shape)
        if len(inputs.shape) != len(want) or self._weight_shapes(tuple(
                w if d is None else d for d, w in zip(inputs.shape, want))) != (
                    self.kernel.shape, None if self.bias is None else self.bias.shape):
            raise ValueError(f"Input 0 of layer '{self.name}' is incompatible with the layer: "
                             f"it was built for inputs of shape {format_shape(want)}, received "
                             f"{format_shape(inputs.shape)}")

    def build(self, input_shape: Any) -> None:
        kernel, bias = self._weight_shapes(tuple(input_shape))
        self.kernel = self.add_weight("kernel", kernel, self.kernel_initializer,
                                      self.kernel_regularizer)
        self.bias = None if bias is None else self.add_weight(
            "bias", bias, self.bias_initializer, self.bias_regularizer)
        self.build_input_shape = tuple(input_shape)
        self.built = True

    def call(self, inputs: Node) -> Node:
        out = K.einsum(self.equation, inputs, self.kernel)
        if self.bias is not None:
            out = out + self.bias
        out = self.activation(out)
        add_activity_loss(self, self.activity_regularizer, out)
        return out

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "output_shape": list(self.partial_output_shape), "equation": self.equation,
            "activation": activations.serialize(self.activation), "bias_axes": self.bias_axes,
            **_serialized(self), "quantization_config": None})
        return config


# ---- MultiHeadAttention ----------------------------------------------------------------------
