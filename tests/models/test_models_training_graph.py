"""The training step is ONE compiled graph: forward, loss, gradients and optimizer updates are
all nodes of ``model.train_function.graph`` (no gradient computed in Python)."""

from __future__ import annotations

import numpy as np
import pytest
from model_helpers import blobs

import kiln
from kiln import layers
from kiln.core import Function, toposort


def _mlp(dropout: float = 0.0) -> kiln.Sequential:
    stack = [kiln.Input((8,)), layers.Dense(16, activation="relu")]
    if dropout:
        stack.append(layers.Dropout(dropout))
    stack.append(layers.Dense(10, activation="softmax"))
    return kiln.Sequential(stack)


def test_train_step_graph_contains_gradients_and_updates():
    x, y = blobs(64)
    model = _mlp()
    model.compile(kiln.optimizers.SGD(0.1, momentum=0.9), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    fn = model.train_function
    assert isinstance(fn, Function)
    nodes = fn.graph.nodes
    ops = fn.graph.count_ops()
    # backward of Dense: matmuls whose operand is a transposed activation/kernel
    transposed_matmuls = [n for n in nodes if n.op == "matmul"
                          and any(i.op == "transpose" for i in n.inputs)]
    assert len(transposed_matmuls) >= 3
    assert ops["matmul"] >= 2 + 3
    # the fused stable cross-entropy replaced log(softmax) (prediction came from a softmax)
    assert ops.get("sparse_softmax_cross_entropy", 0) == 1
    updated = {id(v) for v, _ in fn.updates}
    for var in model.trainable_weights:
        assert id(var) in updated, var.name
        assert id(model.optimizer.get_slot(var, "momentum")) in updated
    assert id(model.optimizer.iterations) in updated
    # every update is a graph node that depends on the batch (it contains the gradient)
    placeholders = {id(p) for p in fn.inputs}
    for var in model.trainable_weights:
        value = dict((id(v), n) for v, n in fn.updates)[id(var)]
        assert any(id(n) in placeholders for n in toposort([value]))


def test_weights_change_only_through_the_compiled_updates():
    x, y = blobs(32)
    model = _mlp()
    model.compile("sgd", "sparse_categorical_crossentropy")
    before = model.get_weights()
    model.train_on_batch(x, y)
    after = model.get_weights()
    assert all(not np.array_equal(a, b) for a, b in zip(before, after))
    assert int(model.optimizer.iterations.numpy()) == 1


def test_dropout_reads_the_rng_key_and_counter_advances():
    x, y = blobs(64)
    model = _mlp(dropout=0.5)
    model.compile("sgd", "sparse_categorical_crossentropy")
    assert isinstance(model._rng_seed, int)
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    graph = model.train_function.graph
    key = [p for p in graph.inputs if p.name == "rng_key"]
    assert key and key[0].type.shape == (2,) and key[0].dtype == "int64"
    assert graph.count_ops().get("random_uniform", 0) >= 1
    assert model._rng_counter == 8


def test_batchnorm_moving_statistics_are_updated_in_the_same_step():
    x, y = blobs(64)
    model = kiln.Sequential([kiln.Input((8,)), layers.Dense(16),
                             layers.BatchNormalization(), layers.Dense(10, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy")
    bn = model.layers[1]
    moving = bn.non_trainable_weights
    before = [w.numpy() for w in moving]
    model.fit(x, y, epochs=1, batch_size=64, verbose=0)
    updated = {id(v) for v, _ in model.train_function.updates}
    assert moving and all(id(w) in updated for w in moving)
    assert all(not np.array_equal(b, w.numpy()) for b, w in zip(before, moving))


def test_regularization_penalty_is_part_of_the_loss():
    x, y = blobs(32)
    model = kiln.Sequential([kiln.Input((8,)), layers.Dense(
        10, activation="softmax", kernel_regularizer=kiln.regularizers.L2(0.5))])
    model.compile("sgd", "sparse_categorical_crossentropy")
    plain = kiln.losses.sparse_categorical_crossentropy(y, model.predict(x, verbose=0)).mean()
    penalty = 0.5 * np.sum(np.square(model.layers[0].kernel.numpy()))
    loss = model.evaluate(x, y, verbose=0, batch_size=32)
    np.testing.assert_allclose(loss, plain + penalty, rtol=1e-5)


def test_compile_report_builds_the_train_function_on_demand():
    model = _mlp()
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    assert model.train_function is None
    model.compile_report()
    assert model.train_function is not None
    assert model.train_function.graph.count_ops()["matmul"] >= 5


def test_layer_add_loss_alone_trains_without_compile_loss():
    class ActivityPenalty(layers.Layer):
        def call(self, x):
            self.add_loss(kiln.ops.mean(kiln.ops.square(x)))
            return x

    inp = kiln.Input((3,))
    model = kiln.Model(inp, ActivityPenalty()(layers.Dense(2)(inp)))
    model.compile(kiln.optimizers.SGD(0.1))
    history = model.fit(np.ones((8, 3), np.float32), epochs=5, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_empty_data_is_refused():
    model = _mlp()
    model.compile("sgd", "sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match="empty"):
        model.fit(np.zeros((0, 8), np.float32), np.zeros(0, np.int64), verbose=0)
