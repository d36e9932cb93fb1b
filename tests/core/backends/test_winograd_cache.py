"""A predict plan's Winograd kernel transform made once per version of the weights
(kernels/conv/winograd_cache.py): repeated calls transform once; ``set_weights``,
``Variable.assign`` and a training step each make the next call transform the new weights,
whose answer equals a float64 NumPy convolution; a training plan transforms at every step."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_targets import set_cpu

import kiln
from kiln.core.backends.cpu import options, target
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.kernels.conv import winograd, winograd_cache

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the native path")


@pytest.fixture(autouse=True)
def _winograd_at_any_size(cpu_options):
    cpu_options(winograd_min_outputs=0)


@pytest.fixture
def transforms(monkeypatch):
    """Counts the kernel transforms run (a stride-2 transform is four, one per phase)."""
    assert options.current().winograd_cache
    count = [0]
    real = winograd.Geometry.kernel_transform

    def counted(self, w, out):
        count[0] += 1
        real(self, w, out)

    monkeypatch.setattr(winograd.Geometry, "kernel_transform", counted)
    return count


def _model(stride: int) -> kiln.Model:
    kiln.utils.set_random_seed(stride)
    return kiln.Sequential([kiln.Input((9, 9, 8)),
                            kiln.layers.Conv2D(16, 3 if stride == 1 else 4, strides=stride,
                                               activation="relu")])


def _reference(model: kiln.Model, x: np.ndarray, stride: int) -> np.ndarray:
    w, b = (np.asarray(v, np.float64) for v in model.layers[0].get_weights())
    k = w.shape[0]
    oh = (x.shape[1] - k) // stride + 1
    out = np.zeros((x.shape[0], oh, oh, w.shape[3]))
    span = stride * (oh - 1) + 1
    for i in range(k):
        for j in range(k):
            patch = x[:, i:i + span:stride, j:j + span:stride, :].astype(np.float64)
            out += np.einsum("nhwc,co->nhwo", patch, w[i, j])
    return np.maximum(out + b, 0.0)


def _check(model, x, stride):
    got = model.predict_on_batch(x)
    want = _reference(model, x, stride)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def _labels(model, x):
    return [s.label for s in model.predict_function.program.plan([x]).steps]


@pytest.mark.parametrize("stride", [1, 2])
def test_new_weights_are_transformed_once_and_reach_the_answer(stride, transforms):
    model = _model(stride)
    x = np.random.default_rng(0).normal(size=(2, 9, 9, 8)).astype(np.float32)
    _check(model, x, stride)
    assert "conv2d:winograd_kernel" in _labels(model, x)
    per = transforms[0]  # one transform's count (four phases with stride 2)
    assert per in (1, 4)
    for _ in range(3):
        _check(model, x, stride)
    assert transforms[0] == per  # the weights did not change: no transform
    w, b = model.layers[0].get_weights()
    model.set_weights([-0.5 * w, b + 0.1])
    _check(model, x, stride)
    assert transforms[0] == 2 * per
    model.layers[0].kernel.assign(np.flip(w, axis=0))
    _check(model, x, stride)
    _check(model, x, stride)
    assert transforms[0] == 3 * per


@pytest.mark.parametrize("stride", [1, 2])
def test_a_training_step_changes_what_predict_transforms(stride, transforms):
    model = _model(stride)
    model.compile(kiln.optimizers.SGD(0.1), "mse")
    x = np.random.default_rng(1).normal(size=(2, 9, 9, 8)).astype(np.float32)
    y = np.ones(model.predict_on_batch(x).shape, np.float32)
    before = model.predict_on_batch(x)
    for _ in range(2):
        model.train_on_batch(x, y)
        _check(model, x, stride)
    assert not np.allclose(before, model.predict_on_batch(x))


def test_only_weights_a_plan_reads_and_does_not_update_are_cached():
    model = _model(1)
    model.compile(kiln.optimizers.SGD(0.1), "mse")
    x = np.random.default_rng(2).normal(size=(2, 9, 9, 8)).astype(np.float32)
    y = np.zeros(model.predict_on_batch(x).shape, np.float32)
    model.predict_on_batch(x)
    model.train_on_batch(x, y)

    def kernels(fn, feeds):
        steps = fn.program.plan(feeds).steps
        return [s.fn for s in steps if s.label == "conv2d:winograd_kernel"]

    assert all(isinstance(f, winograd_cache.TransformOnce)
               for f in kernels(model.predict_function, [x]))
    assert kernels(model.predict_function, [x])
    assert not any(isinstance(f, winograd_cache.TransformOnce)
                   for f in kernels(model.train_function, [x, y]))


@pytest.mark.parametrize("avx512", [True, False])
def test_a_predict_plan_takes_winograd_from_fewer_output_positions(avx512, monkeypatch,
                                                                   cpu_options):
    # 7 x 7 = 49 output positions a sample: the transform made once pays from
    # winograd_cached_min_outputs (here 200: 5 samples) against the register tiles (AVX-512),
    # from winograd_cached_min_outputs_no_tiles (here 100: 3 samples) against AVX2's direct
    # loops; one made at every call (a training step's) from winograd_min_outputs
    set_cpu(monkeypatch, avx512)
    cpu_options(winograd_min_outputs=512, winograd_cached_min_outputs=200,
                winograd_cached_min_outputs_no_tiles=100)
    first = 5 if target.current().tile_conv else 3
    model = _model(1)
    model.compile(kiln.optimizers.SGD(0.1), "mse")
    x = np.random.default_rng(3).normal(size=(5, 9, 9, 8)).astype(np.float32)
    for n, winograd_runs in ((first - 1, False), (first, True)):
        _check(model, x[:n], 1)
        assert ("conv2d:winograd_kernel" in _labels(model, x[:n])) == winograd_runs
    y = np.zeros(model.predict_on_batch(x).shape, np.float32)
    model.train_on_batch(x, y)  # 245 positions, the kernel written by the step: direct
    labels = [s.label for s in model.train_function.program.plan([x, y]).steps]
    assert "conv2d:winograd_kernel" not in labels and any(s.startswith("conv2d") for s in labels)
    _check(model, x, 1)


@pytest.mark.parametrize("workers", [2, 3])
def test_one_image_splits_the_products_over_the_points(workers, monkeypatch, cpu_options):
    # a serving batch: the input transform, the products split over the transform's points,
    # the output transform (winograd_pipeline._by_points); the same bits on every engine
    from kiln.core.backends.cpu.runtime import parts, threads

    monkeypatch.setattr(threads, "kernel_threads", lambda: workers)
    cpu_options(winograd_point_split_work=0, winograd_cached_min_outputs=0,
                winograd_cached_min_outputs_no_tiles=0)
    x = np.random.default_rng(workers).normal(size=(1, 9, 9, 8)).astype(np.float32)
    got = {}
    for engine in ("serial", "spin", "portable"):
        with parts.forced(engine):
            model = _model(1)
            _check(model, x, 1)
            got[engine] = model.predict_on_batch(x)
        labels = _labels(model, x)
        assert {"conv2d:winograd_input", "conv2d:winograd_products",
                "conv2d:winograd_output"} <= set(labels), labels
    np.testing.assert_array_equal(got["spin"], got["serial"])
    np.testing.assert_array_equal(got["portable"], got["serial"])
