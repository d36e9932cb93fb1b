"""What the arguments kiln took over from Keras 3.15's signatures do (tests/test_keras_signatures.py
checks the names, order and defaults): each against NumPy or Keras' documented behaviour, and
a clear error where kiln cannot honour a value."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import callbacks, layers, losses, metrics, ops, regularizers

rng = np.random.default_rng(44)


# ---- positional arguments now mean what they mean in Keras ---------------------------------
def test_rnn_second_positional_is_the_activation():
    lstm = layers.LSTM(4, "relu")
    assert lstm.activation is kiln.activations.relu and lstm.return_sequences is False
    gru = layers.GRU(3, "relu", "hard_sigmoid")
    assert gru.activation is kiln.activations.relu
    assert gru.recurrent_activation is kiln.activations.hard_sigmoid
    assert layers.SimpleRNN(2, "relu").activation is kiln.activations.relu
    again = layers.LSTM.from_config(lstm.get_config())
    assert again.activation is kiln.activations.relu and again.units == 4


def test_loss_and_metric_classes_take_keras_positional_order():
    y_true = rng.normal(size=(4, 3)).astype("float32")
    y_pred = rng.normal(size=(4, 3)).astype("float32")
    per_sample = ((y_true - y_pred) ** 2).mean(-1)
    # MeanSquaredError(reduction, name, dtype)
    np.testing.assert_allclose(losses.MeanSquaredError("sum")(y_true, y_pred),
                               per_sample.sum(), rtol=1e-5)
    # BinaryCrossentropy(from_logits, ...): the logits' cross-entropy
    labels = (rng.uniform(size=(4, 3)) > 0.5).astype("float32")
    p = 1 / (1 + np.exp(-y_pred.astype(np.float64)))
    want = -(labels * np.log(p) + (1 - labels) * np.log(1 - p)).mean(-1).mean()
    np.testing.assert_allclose(losses.BinaryCrossentropy(True)(labels, y_pred), want,
                               rtol=1e-4)
    # BinaryAccuracy(name, dtype, threshold)
    acc = metrics.BinaryAccuracy("acc", None, 0.7)
    acc.update_state(labels, p)
    assert acc.name == "acc"
    np.testing.assert_allclose(acc.result(), (labels == (p > 0.7)).mean(), rtol=1e-6)
    with pytest.raises(TypeError, match="MeanSquaredError: too many positional"):
        losses.MeanSquaredError("sum", "mse", None, 1)
    assert metrics.Mean().name == "mean" and metrics.Sum().name == "sum"


def test_sparse_top_k_from_sorted_ids():
    labels = np.array([2, 0, 1, 3])
    ids = np.array([[2, 1, 0], [1, 2, 0], [0, 1, 2], [0, 1, 2]])
    for k in (1, 2, 3):
        want = np.mean([label in row[:k] for label, row in zip(labels, ids)])
        m = metrics.SparseTopKCategoricalAccuracy(k, from_sorted_ids=True)
        m.update_state(labels, ids)
        np.testing.assert_allclose(m.result(), want)


def test_sparse_crossentropy_metric_ignore_class_follows_keras():
    # Keras 3.15 (JAX and TensorFlow backends): an ignored label counts as 0; sample weights
    # are zeroed for it (so with weights the mean is over the other labels)
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]], "float32")
    y = np.array([0, 1, 2])
    m = metrics.SparseCategoricalCrossentropy(ignore_class=1)
    m.update_state(y, p)
    np.testing.assert_allclose(m.result(), -(np.log(0.7) + np.log(0.4)) / 3, rtol=1e-5)
    m = metrics.SparseCategoricalCrossentropy(ignore_class=1)
    m.update_state(y[:, None], p, sample_weight=np.array([1.0, 1.0, 3.0]))
    np.testing.assert_allclose(m.result(), -(np.log(0.7) + 3 * np.log(0.4)) / 4, rtol=1e-5)


# ---- ops -----------------------------------------------------------------------------------
def test_binary_ops_take_x1_x2_and_prod_takes_a_dtype():
    a, b = np.array([1.0, 2.0], "float32"), np.array([3.0, 5.0], "float32")
    np.testing.assert_allclose(ops.subtract(x1=a, x2=b), a - b)
    np.testing.assert_array_equal(ops.logical_xor(x1=a > 1, x2=b > 4), [False, False])
    big = np.array([100000, 100000], "int32")
    out = ops.prod(big, dtype="int64")
    assert out.dtype == np.int64 and int(out) == 10 ** 10
    assert ops.prod(np.array([2.0, 3.0], "float32"), dtype="float64").dtype == np.float64
    np.testing.assert_array_equal(ops.arange(1, 7, None), np.arange(1, 7))
    with pytest.raises(ValueError, match="convert_to_tensor: ragged=True is not supported"):
        ops.convert_to_tensor([1.0], ragged=True)


# ---- layers --------------------------------------------------------------------------------
def test_add_weight_keras_forms_and_aggregation():
    layer = layers.Layer(name="holder")
    w = layer.add_weight((2, 3), "ones", name="w", aggregation="mean")
    np.testing.assert_array_equal(w.numpy(), np.ones((2, 3)))
    assert w.aggregation == "mean" and w.short_name == "w"
    legacy = layer.add_weight("v", (4,), "zeros")  # kiln's older form: the name first
    assert legacy.short_name == "v" and legacy.numpy().shape == (4,)
    assert layer.add_weight(shape=(2,), dtype="int32").numpy().tolist() == [0, 0]
    with pytest.raises(ValueError, match="holder: add_weight.aggregation='max'.: expected"):
        layer.add_weight(shape=(1,), aggregation="max")
    with pytest.raises(NotImplementedError, match="overwrite_with_gradient=True"):
        layer.add_weight(shape=(1,), overwrite_with_gradient=True)
    with pytest.raises(ValueError, match="`shape` both positionally and as a keyword"):
        layer.add_weight((1,), shape=(1,))


def test_activity_regularizer_of_the_base_layer_joins_the_loss():
    class Scale(layers.Layer):
        def call(self, x):
            return x * 2.0

    x = rng.normal(size=(4, 3)).astype("float32")
    model = kiln.Sequential([kiln.Input((3,)), Scale(activity_regularizer=regularizers.L2(0.5))])
    model.compile(loss="mse")
    penalty = 0.5 * np.sum((2 * x.astype(np.float64)) ** 2) / len(x)
    np.testing.assert_allclose(model.evaluate(x, 2 * x, verbose=0), penalty, rtol=1e-4)


@pytest.mark.parametrize("make, match", [
    (lambda: kiln.Input((3,), optional=True), "optional=True is not supported"),
    (lambda: kiln.Input((3,), ragged=True), "ragged=True is not supported"),
    (lambda: layers.Dense(2, lora_rank=4), "Dense: lora_rank is not supported"),
    (lambda: layers.MultiHeadAttention(2, 4, sliding_window=3),
     "sliding_window=3 is not supported"),
    (lambda: layers.BatchNormalization(renorm=True), "renorm is not supported"),
])
def test_unsupported_keras_values_are_refused(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# ---- callbacks -----------------------------------------------------------------------------
class _Stub:
    stop_training = False


def test_terminate_on_nan_raise_error():
    graceful = callbacks.TerminateOnNaN()
    graceful.set_model(_Stub())
    graceful.on_batch_end(0, {"loss": float("nan")})
    assert graceful.model.stop_training is True
    strict = callbacks.TerminateOnNaN(raise_error=True)
    strict.set_model(_Stub())
    strict.on_batch_end(2, {"loss": 0.5})
    with pytest.raises(RuntimeError, match="NaN or Inf loss encountered at batch 3"):
        strict.on_batch_end(3, {"loss": float("inf")})


def _small_model():
    model = kiln.Sequential([kiln.Input((3,)), layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def test_backup_double_checkpoint_resumes_from_the_previous_backup(tmp_path):
    from kiln.callbacks.backup import BACKUP_NAME

    x, y = rng.normal(size=(8, 3)).astype("float32"), rng.normal(size=(8, 1)).astype("float32")
    run = tmp_path / "run"
    _small_model().fit(x, y, epochs=2, batch_size=4, verbose=0, callbacks=[
        callbacks.BackupAndRestore(run, double_checkpoint=True, delete_checkpoint=False)])
    path = run / BACKUP_NAME
    assert path.exists() and (run / (BACKUP_NAME + ".bkp")).exists()
    path.write_bytes(b"not an HDF5 file")  # the last backup is damaged
    with pytest.raises(ValueError):
        _small_model().fit(x, y, epochs=3, batch_size=4, verbose=0,
                           callbacks=[callbacks.BackupAndRestore(run)])
    path.write_bytes(b"not an HDF5 file")
    model = _small_model()
    bk = callbacks.BackupAndRestore(run, double_checkpoint=True)
    model.fit(x, y, epochs=3, batch_size=4, verbose=0, callbacks=[bk])
    assert bk.restored["epoch"] == 1  # the backup before the last one (after epoch 0)
    # epoch 0 (2 batches) restored, then epochs 1 and 2 trained
    assert int(model.optimizer.iterations.numpy()) == 6


# ---- saving, models, utils -----------------------------------------------------------------
def test_saving_arguments_kiln_cannot_honour_are_refused(tmp_path):
    model = _small_model()
    with pytest.raises(ValueError, match="max_shard_size=1 is not supported by kiln"):
        model.save_weights(tmp_path / "m.weights.h5", max_shard_size=1)
    with pytest.raises(ValueError, match="zipped=False is not supported"):
        model.save(tmp_path / "m.keras", zipped=False)
    with pytest.raises(TypeError, match="unexpected keyword argument.*'bogus'"):
        model.evaluate(np.zeros((2, 3)), np.zeros((2, 1)), verbose=0, bogus=1)
    with pytest.raises(NotImplementedError, match="clone_model: input_tensors"):
        kiln.models.clone_model(model, kiln.Input((3,)))
    assert list(tmp_path.iterdir()) == []


def test_plot_model_expand_nested_draws_the_inner_model(tmp_path):
    inner = kiln.Sequential([kiln.Input((3,)), layers.Dense(4, activation="relu", name="d1"),
                             layers.Dense(2, name="d2")], name="inner")
    inputs = kiln.Input((3,), name="x")
    model = kiln.Model(inputs, layers.Dense(1, name="head")(inner(inputs)))
    flat = kiln.utils.plot_model(model, tmp_path / "flat.dot")
    nested = kiln.utils.plot_model(model, tmp_path / "nested.dot", expand_nested=True,
                                   show_layer_activations=True, show_trainable=True)
    flat_text, text = open(flat).read(), open(nested).read()
    assert "cluster_inner" not in flat_text and '"inner/d1"' not in flat_text
    assert 'subgraph "cluster_inner"' in text
    assert '"inner/d1" -> "inner/d2";' in text and '"inner" -> "head";' in text
    assert "<td>Activation</td><td>relu</td>" in text and "<td>Trainable</td>" in text
    assert "splines=ortho" in text and "dpi=200" in text  # Keras' defaults
    with pytest.raises(TypeError, match="plot_model: unexpected keyword argument"):
        kiln.utils.plot_model(model, tmp_path / "x.dot", layer_range=["a", "b"])
