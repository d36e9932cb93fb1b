"""Every registry op's examples with a zero-size axis (each axis of the first input in turn):
the op either refuses in its shape rule with a ValueError naming it, or the CPU backend gives
exactly the reference's result (shape and values), never bytes the input does not own."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.core.ops import all_ops
from kiln.core.ops.registry import SOURCE, apply

OPS = all_ops()
NAMES = sorted(n for n, op in OPS.items() if op.kind != SOURCE and op.examples is not None)


def _cases(name: str):
    op = OPS[name]
    for ex in op.examples(np.random.default_rng(0), "float32"):
        inputs = [np.asarray(a) for a in ex.inputs]
        if not inputs or inputs[0].ndim == 0:
            continue
        for axis in range(inputs[0].ndim):
            zeroed = list(inputs)
            zeroed[0] = np.take(inputs[0], np.arange(0), axis=axis)
            yield axis, zeroed, ex.attrs


@pytest.mark.parametrize("name", NAMES)
def test_zero_size_axes_are_refused_or_computed_exactly(name):
    op = OPS[name]
    for axis, inputs, attrs in _cases(name):
        where = f"{name}: axis {axis} of {inputs[0].shape} empty, attrs {attrs}"
        phs = [kiln.placeholder(a.shape, a.dtype.name) for a in inputs]
        try:
            node = apply(name, *phs, **attrs)
        except (ValueError, TypeError) as exc:  # a fused/loop op may name its inner op
            assert any(n in str(exc) for n in OPS), f"{where}: the refusal names no op: {exc}"
            continue
        fn = kiln.function(phs, node, backend="cpu", optimize=False)
        try:
            with np.errstate(all="ignore"):
                expected = np.asarray(op.ref(*inputs, **attrs))
        except (ValueError, IndexError) as exc:
            try:  # the reference refuses: kiln must refuse too, not return a value
                got = fn(*inputs)
            except (ValueError, IndexError):
                continue
            pytest.fail(f"{where}: the reference refuses ({exc}) but the CPU backend returned "
                        f"an array of shape {got.shape}")
        got = fn(*inputs)
        assert got.shape == expected.shape, where
        np.testing.assert_allclose(got, expected.astype(got.dtype), rtol=1e-5, atol=1e-6,
                                   equal_nan=True, err_msg=where)


@pytest.mark.parametrize("layer", [kiln.layers.Resizing(8, 8), kiln.layers.CenterCrop(4, 4),
                                   kiln.layers.RandomFlip(), kiln.layers.Rescaling(0.5)])
def test_image_layers_refuse_images_without_pixels(layer):
    if isinstance(layer, kiln.layers.Rescaling):  # elementwise: an empty batch stays empty
        assert layer(np.zeros((2, 0, 0, 3), "float32")).shape == (2, 0, 0, 3)
        return
    with pytest.raises(ValueError, match=rf"\({type(layer).__name__}\): an image needs at least "
                                         r"one pixel, received images of shape \(None, 0, 0, 3\)"):
        layer(np.zeros((2, 0, 0, 3), "float32"))


@pytest.mark.parametrize("op", ["max", "min", "logsumexp"])
def test_reductions_without_identity_refuse_an_empty_batch_at_run_time(op):
    """The plan re-runs the shape rule with the fed shapes: a batch of 0 is refused before a
    kernel runs (not the reduction's identity, -inf or +inf, passed off as a value)."""
    x = kiln.placeholder((None, 3))
    fn = kiln.function([x], getattr(kiln.ops, op)(x, axis=0))
    data = np.arange(6, dtype="float32").reshape(2, 3)
    expected = {"max": data.max(0), "min": data.min(0),
                "logsumexp": np.log(np.exp(data).sum(0))}[op]
    np.testing.assert_allclose(fn(data), expected, rtol=1e-6)
    # kiln.ops.logsumexp is built on max, whose shape rule refuses
    with pytest.raises(ValueError, match=rf"({op}|max): cannot reduce axis 0 of shape \(0, 3\): "
                                         "it is empty"):
        fn(np.ones((0, 3), "float32"))
