"""Weight constraints (kiln.constraints) against NumPy transcriptions of Keras 3's formulas;
layers' ``*_constraint`` arguments applied by the optimizer after each step (checked against a
closed-form SGD step); configs and .keras round trips; regularizer aliases and
OrthogonalRegularizer; the Keras top-level and saving names."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
from kiln import constraints as C
from kiln import layers
from kiln import regularizers as R

rng = np.random.default_rng(2)
EPS = 1e-7


def _run(constraint, w):
    ph = kiln.placeholder(w.shape, "float64")
    return kiln.function([ph], [constraint(ph)], backend="reference")(w)[0]


def _norms(w, axis):
    return np.sqrt(np.sum(w ** 2, axis=tuple(np.atleast_1d(axis)), keepdims=True))


@pytest.mark.parametrize("constraint, oracle", [
    (C.MaxNorm(1.5), lambda w: w * np.clip(_norms(w, 0), 0, 1.5) / (EPS + _norms(w, 0))),
    (C.MaxNorm(0.7, axis=[0, 1]),
     lambda w: w * np.clip(_norms(w, [0, 1]), 0, 0.7) / (EPS + _norms(w, [0, 1]))),
    (C.MinMaxNorm(0.5, 1.0, rate=0.3, axis=1),
     lambda w: w * (0.3 * np.clip(_norms(w, 1), 0.5, 1.0) + 0.7 * _norms(w, 1))
     / (EPS + _norms(w, 1))),
    (C.NonNeg(), lambda w: w * (w >= 0)),
    (C.UnitNorm(axis=-1), lambda w: w / (EPS + _norms(w, -1))),
])
def test_constraint_formulas(constraint, oracle):
    w = rng.normal(size=(3, 4, 2))
    np.testing.assert_allclose(_run(constraint, w), oracle(w), rtol=1e-12)


@pytest.mark.parametrize("constraint", [C.MaxNorm(3.0, axis=[0, 1, 2]),
                                        C.MinMaxNorm(0.1, 2.0, 0.5), C.NonNeg(),
                                        C.UnitNorm(1)], ids=lambda c: type(c).__name__)
def test_constraint_config_round_trip(constraint):
    data = json.loads(json.dumps(C.serialize(constraint)))
    again = C.deserialize(data)
    assert type(again) is type(constraint) and again.get_config() == constraint.get_config()
    w = rng.normal(size=(2, 3, 2, 2))
    np.testing.assert_array_equal(_run(again, w), _run(constraint, w))


def test_get_names_and_errors():
    assert isinstance(C.get("non_neg"), C.NonNeg)
    assert isinstance(C.get("MaxNorm"), C.MaxNorm) and C.get("max_norm").max_value == 2.0
    assert C.get(None) is None and C.max_norm is C.MaxNorm
    with pytest.raises(ValueError, match="Unknown constraint 'nope'"):
        C.get("nope")
    with pytest.raises(ValueError, match="max_value must be a number >= 0"):
        C.MaxNorm(-1.0)
    with pytest.raises(ValueError, match="must be >= min_value"):
        C.MinMaxNorm(2.0, 1.0)
    with pytest.raises(ValueError, match="Dense: invalid kernel_constraint: Unknown"):
        layers.Dense(2, kernel_constraint="nope")


def test_dense_constraints_applied_after_the_sgd_step():
    x = rng.normal(size=(8, 3)).astype("float32")
    y = rng.normal(size=(8, 2)).astype("float32")
    dense = layers.Dense(2, kernel_constraint=C.NonNeg(), bias_constraint=C.MaxNorm(0.05))
    model = kiln.Sequential([kiln.Input((3,)), dense])
    model.compile(kiln.optimizers.SGD(0.1), "mse")
    w0, b0 = (v.numpy().astype(np.float64) for v in dense.weights)
    assert dense.kernel.constraint is dense.kernel_constraint
    model.train_on_batch(x, y)
    err = x @ w0 + b0 - y
    gw = 2.0 / err.size * x.T @ err
    gb = 2.0 / err.size * err.sum(0)
    w1, b1 = w0 - 0.1 * gw, b0 - 0.1 * gb
    w1 = w1 * (w1 >= 0)
    nb = np.sqrt(np.sum(b1 ** 2))
    b1 = b1 * min(nb, 0.05) / (EPS + nb)
    np.testing.assert_allclose(dense.kernel.numpy(), w1, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dense.bias.numpy(), b1, rtol=1e-5, atol=1e-7)


def test_other_layers_take_constraints_and_keep_them():
    x = rng.normal(size=(6, 5, 4, 2)).astype("float32")
    model = kiln.Sequential([
        kiln.Input((5, 4, 2)),
        layers.Conv2D(3, 2, kernel_constraint=C.MaxNorm(0.2, axis=[0, 1, 2])),
        layers.BatchNormalization(gamma_constraint="non_neg", beta_constraint=C.UnitNorm(0)),
        layers.Reshape((4 * 3, 3)),
        layers.SimpleRNN(2, recurrent_constraint=C.MaxNorm(0.3), kernel_constraint="non_neg"),
        layers.LayerNormalization(gamma_constraint=C.MinMaxNorm(0.5, 0.9, axis=0)),
        layers.Dense(2)])
    model.compile(kiln.optimizers.SGD(0.5), "mse")
    model.fit(x, rng.normal(size=(6, 2)), epochs=3, batch_size=3, verbose=0)
    conv, bn, _, rnn, ln, _ = model.layers
    assert np.all(_norms(conv.kernel.numpy(), [0, 1, 2]) <= 0.2 + 1e-6)
    assert np.all(bn.gamma.numpy() >= 0)
    np.testing.assert_allclose(np.linalg.norm(bn.beta.numpy()), 1.0, rtol=1e-5)
    cell_weights = {v.name.rsplit("/", 1)[-1]: v.numpy() for v in rnn.weights}
    assert np.all(_norms(cell_weights["recurrent_kernel"], 0) <= 0.3 + 1e-6)
    assert np.all(cell_weights["kernel"] >= 0)
    assert 0.5 - 1e-5 <= np.linalg.norm(ln.gamma.numpy()) <= 0.9 + 1e-5
    # the configs carry them, so a clone and a .keras file keep them
    assert conv.get_config()["kernel_constraint"] == C.serialize(conv.kernel_constraint)
    clone = layers.Conv2D.from_config(conv.get_config())
    assert clone.kernel_constraint.get_config() == conv.kernel_constraint.get_config()


def test_multi_head_attention_passes_constraints_to_its_projections():
    q = kiln.Input((4, 3))
    mha = layers.MultiHeadAttention(2, 2, kernel_constraint="non_neg",
                                    bias_constraint=C.MaxNorm(0.01))
    model = kiln.Model(q, layers.GlobalAveragePooling1D()(mha(q, q)))
    model.compile(kiln.optimizers.SGD(0.5), "mse")
    x = rng.normal(size=(6, 4, 3)).astype("float32")
    model.fit(x, rng.normal(size=(6, 3)).astype("float32"), epochs=2, batch_size=3, verbose=0)
    kernels = [w for w in mha.weights if w.name.endswith("kernel")]
    biases = [w for w in mha.weights if w.name.endswith("bias")]
    assert len(kernels) == len(biases) == 4
    for w in kernels:
        assert np.all(w.numpy() >= 0), w.name
    for w in biases:
        assert np.linalg.norm(w.numpy(), axis=0).max() <= 0.01 + 1e-6, w.name
    assert mha.get_config()["kernel_constraint"]["class_name"] == "NonNeg"


@kiln.saving.register_keras_serializable(package="TestConstraints")
class Clip(C.Constraint):
    def __init__(self, c=1.0):
        self.c = c

    def __call__(self, w):
        return kiln.ops.clip(w, -self.c, self.c)

    def get_config(self):
        return {"c": self.c}


def test_keras_file_round_trip_with_custom_constraint(tmp_path):
    x = rng.normal(size=(8, 3)).astype("float32")
    y = rng.normal(size=(8, 2)).astype("float32")
    model = kiln.Sequential([kiln.Input((3,)),
                             layers.Dense(4, kernel_constraint=Clip(0.05),
                                          bias_constraint=C.NonNeg()),
                             layers.Dense(3, kernel_constraint=C.MinMaxNorm(0.1, 0.5)),
                             layers.Dense(2, kernel_constraint=C.MaxNorm(1.0, axis=[0]),
                                          bias_constraint=C.UnitNorm(0))])
    model.compile(kiln.optimizers.SGD(0.5), "mse")
    model.fit(x, y, epochs=2, batch_size=4, verbose=0)
    path = str(tmp_path / "c.keras")
    model.save(path)
    loaded = kiln.models.load_model(path)
    for a, b in zip(model.layers, loaded.layers):
        for key in ("kernel_constraint", "bias_constraint"):
            assert a.get_config()[key] == b.get_config()[key], key
    d0 = loaded.layers[0]
    assert isinstance(d0.kernel_constraint, Clip) and d0.kernel_constraint.c == 0.05
    assert isinstance(d0.bias_constraint, C.NonNeg)
    loaded.compile(kiln.optimizers.SGD(5.0), "mse")
    loaded.fit(x, y * 100, epochs=1, batch_size=8, verbose=0)  # a huge step: clipped
    assert np.abs(d0.kernel.numpy()).max() <= 0.05 + 1e-7
    assert np.all(d0.bias.numpy() >= 0)


def test_constraint_changing_the_shape_is_refused():
    class Bad(C.Constraint):
        def __call__(self, w):
            return kiln.ops.sum(w, axis=0)

    model = kiln.Sequential([kiln.Input((3,)), layers.Dense(2, kernel_constraint=Bad())])
    model.compile("sgd", "mse")
    with pytest.raises(ValueError, match=r"constraint .* returned shape \(2,\), the variable has "
                                         r"shape \(3, 2\)"):
        model.train_on_batch(np.ones((2, 3), "float32"), np.ones((2, 2), "float32"))


# ---- regularizers ----------------------------------------------------------------------------
def test_regularizer_aliases_and_orthogonal():
    assert R.l2 is R.L2 and R.l2(0.03).l2 == 0.03 and R.l1_l2(l1=0.1).l1 == 0.1
    w = rng.normal(size=(4, 3))
    for mode in ("rows", "columns"):
        got = _run(R.OrthogonalRegularizer(0.2, mode), w)
        u = w / np.linalg.norm(w, axis=1 if mode == "rows" else 0,
                               keepdims=True)
        p = u @ u.T if mode == "rows" else u.T @ u
        n = p.shape[0]
        want = 0.2 * 0.5 * np.sum(np.abs(p * (1 - np.eye(n)))) / (n * (n - 1) / 2)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    reg = R.OrthogonalRegularizer(0.5, "columns")
    again = R.deserialize(json.loads(json.dumps(R.serialize(reg))))
    assert type(again) is R.OrthogonalRegularizer and again.get_config() == reg.get_config()
    with pytest.raises(ValueError, match="must have rank 2"):
        R.OrthogonalRegularizer()(kiln.placeholder((2, 2, 2), "float64"))
    with pytest.raises(ValueError, match="mode"):
        R.OrthogonalRegularizer(mode="diag")


# ---- Keras top-level and saving names --------------------------------------------------------
def test_keras_top_level_names():
    assert kiln.Layer is layers.Layer and kiln.Loss is kiln.losses.Loss
    assert kiln.Metric is kiln.metrics.Metric and kiln.Optimizer is kiln.optimizers.Optimizer
    assert kiln.Initializer is kiln.initializers.Initializer
    assert kiln.Regularizer is R.Regularizer and kiln.Constraint is C.Constraint
    assert kiln.KerasTensor is kiln.Node
    assert kiln.saving.register_keras_serializable is kiln.saving.register_serializable
    table = kiln.saving.get_custom_objects()
    assert table["TestConstraints>Clip"] is Clip

    class Scale(layers.Layer):
        def call(self, x):
            return x * 2.0

    table["Scale"] = Scale
    try:
        assert kiln.saving.get_registered_object("Scale") is Scale
    finally:
        del table["Scale"]
