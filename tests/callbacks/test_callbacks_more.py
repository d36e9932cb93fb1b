"""SwapEMAWeights, RemoteMonitor and OrbaxCheckpoint (Keras 3.15's callbacks)."""

from __future__ import annotations

import http.server
import json
import os
import socket
import sys
import threading
import urllib.parse

import numpy as np
import pytest

import kiln
from kiln import callbacks as C
from kiln import optimizers as O


def _data():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(48, 3)).astype("float32")
    y = (x @ rng.normal(size=(3, 1)) + 0.1).astype("float32")
    return x, y


def _model(optimizer):
    kiln.utils.set_random_seed(2)
    model = kiln.Sequential([kiln.Input((3,)),
                             kiln.layers.Dense(4, activation="tanh", name="hidden"),
                             kiln.layers.Dense(1, name="out")])
    model.compile(optimizer=optimizer, loss="mse")
    return model


def _averages(opt, model):
    return [opt.get_slot(v, "average").numpy() for v in model.trainable_weights]


def _loss_with(model, weights, x, y):
    """The oracle: the mean squared error of a fresh copy of the model holding ``weights``."""
    twin = _model("sgd")
    twin.set_weights(weights)
    return float(np.mean((twin.predict(x, verbose=0) - y) ** 2))


# ---- SwapEMAWeights -----------------------------------------------------------------------
class _LastEpochWeights(C.Callback):
    """The weights training ended its last epoch with (``fit`` then writes the averages in:
    ``finalize_variable_values``, as Keras)."""

    def on_epoch_end(self, epoch, logs=None):
        self.weights = self.model.get_weights()


def test_validation_uses_the_ema_weights_and_training_keeps_its_own():
    x, y = _data()
    opt = O.SGD(0.05, momentum=0.9, use_ema=True, ema_momentum=0.9)
    model = _model(opt)
    last = _LastEpochWeights()
    hist = model.fit(x, y, epochs=3, batch_size=8, shuffle=False, verbose=0,
                     validation_data=(x, y), callbacks=[C.SwapEMAWeights(), last]).history
    trained = last.weights
    ema = _averages(opt, model)
    assert not all(np.allclose(a, b) for a, b in zip(trained, ema))
    for a, b in zip(model.get_weights(), ema):  # fit ended on the averages
        np.testing.assert_array_equal(a, b)
    # the last epoch's validation ran on the averages ...
    np.testing.assert_allclose(hist["val_loss"][-1], _loss_with(model, ema, x, y), rtol=1e-5)
    assert abs(hist["val_loss"][-1] - _loss_with(model, trained, x, y)) > 1e-6
    # ... and training went on with its own weights: same run without the callback
    plain_opt = O.SGD(0.05, momentum=0.9, use_ema=True, ema_momentum=0.9)
    plain = _model(plain_opt)
    plain_last = _LastEpochWeights()
    plain.fit(x, y, epochs=3, batch_size=8, shuffle=False, verbose=0, validation_data=(x, y),
              callbacks=[plain_last])
    for a, b in zip(plain_last.weights, trained):
        np.testing.assert_array_equal(a, b)


def test_evaluate_and_predict_swap_back():
    x, y = _data()
    opt = O.Adam(0.05, use_ema=True, ema_momentum=0.8)
    model = _model(opt)
    model.fit(x, y, epochs=2, batch_size=8, verbose=0)
    trained, ema = model.get_weights(), _averages(opt, model)
    loss = model.evaluate(x, y, verbose=0, callbacks=[C.SwapEMAWeights()])
    np.testing.assert_allclose(loss, _loss_with(model, ema, x, y), rtol=1e-5)
    pred = model.predict(x, verbose=0, callbacks=[C.SwapEMAWeights()])
    twin = _model("sgd")
    twin.set_weights(ema)
    np.testing.assert_allclose(pred, twin.predict(x, verbose=0), rtol=1e-6)
    for a, b in zip(model.get_weights(), trained):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_averages(opt, model), ema):
        np.testing.assert_array_equal(a, b)


def test_swap_on_epoch_leaves_the_ema_weights_in_the_model():
    x, y = _data()
    seen = []
    opt = O.SGD(0.05, use_ema=True, ema_momentum=0.9)
    model = _model(opt)
    spy = C.LambdaCallback(on_epoch_end=lambda e, logs: seen.append(model.get_weights()))
    model.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0,
              callbacks=[C.SwapEMAWeights(swap_on_epoch=True), spy])
    final = model.get_weights()
    for a, b in zip(final, _averages(opt, model)):  # finalized: averages == weights
        np.testing.assert_array_equal(a, b)
    for a, b in zip(seen[-1], final):  # later callbacks saw the EMA weights
        np.testing.assert_array_equal(a, b)
    # epoch 2 trained from epoch 1's own weights, not from the EMA (swapped back at begin)
    plain_opt = O.SGD(0.05, use_ema=True, ema_momentum=0.9)
    plain = _model(plain_opt)
    plain.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)
    for a, b in zip(_averages(plain_opt, plain), final):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_swap_works_through_wrappers_and_needs_ema():
    x, y = _data()
    inner = O.SGD(0.05, use_ema=True)
    model = _model(O.LossScaleOptimizer(inner, initial_scale=4.0))
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    loss = model.evaluate(x, y, verbose=0, callbacks=[C.SwapEMAWeights()])
    np.testing.assert_allclose(loss, _loss_with(model, _averages(inner, model), x, y),
                               rtol=1e-5)
    ema_sgd = O.SGD(0.05, use_ema=True)
    multi = O.MultiOptimizer(O.OptimizerMap(O.SGD(0.05), {"out/.*": ema_sgd}))
    model = _model(multi)
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    weights = model.get_weights()
    swapped = weights[:2] + [ema_sgd.get_slot(v, "average").numpy()
                             for v in model.trainable_weights[2:]]
    loss = model.evaluate(x, y, verbose=0, callbacks=[C.SwapEMAWeights()])
    np.testing.assert_allclose(loss, _loss_with(model, swapped, x, y), rtol=1e-5)
    with pytest.raises(ValueError, match="use_ema=True"):
        _model(O.SGD()).evaluate(x, y, verbose=0, callbacks=[C.SwapEMAWeights()])
    with pytest.raises(ValueError, match="all inner optimizers having `use_ema=False`"):
        _model(O.MultiOptimizer(O.OptimizerMap(O.SGD()))).evaluate(
            x, y, verbose=0, callbacks=[C.SwapEMAWeights()])


# ---- RemoteMonitor ------------------------------------------------------------------------
class _Recorder(http.server.BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, dict(self.headers), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    _Recorder.received = []
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", _Recorder.received
    httpd.shutdown()
    httpd.server_close()


def test_remote_monitor_posts_form_encoded_logs(server):
    root, received = server
    x, y = _data()
    hist = _model("sgd").fit(x, y, epochs=2, batch_size=16, verbose=0,
                             callbacks=[C.RemoteMonitor(root=root)]).history
    assert [r[0] for r in received] == ["/publish/epoch/end/"] * 2
    for epoch, (_, headers, body) in enumerate(received):
        assert headers["Content-Type"] == "application/x-www-form-urlencoded"
        form = urllib.parse.parse_qs(body.decode())
        assert list(form) == ["data"]
        sent = json.loads(form["data"][0])
        assert sent == {"epoch": epoch, "loss": pytest.approx(hist["loss"][epoch])}


def test_remote_monitor_json_body_headers_and_numpy_values(server):
    root, received = server
    cb = C.RemoteMonitor(root=root, path="/p", field="f", headers={"X-Run": "7"},
                         send_as_json=True)
    cb.on_epoch_end(3, {"loss": np.float32(0.5), "acc": np.array(0.25), "lr": 0.1})
    (path, headers, body), = received
    assert path == "/p" and headers["X-Run"] == "7"
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"epoch": 3, "loss": 0.5, "acc": 0.25, "lr": 0.1}


def test_remote_monitor_warns_when_the_server_is_unreachable():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cb = C.RemoteMonitor(root=f"http://127.0.0.1:{port}")
    with pytest.warns(UserWarning, match="Could not reach RemoteMonitor root server"):
        cb.on_epoch_end(0, {"loss": 1.0})


# ---- OrbaxCheckpoint ----------------------------------------------------------------------
def test_orbax_checkpoint_without_orbax_names_the_package(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "orbax", None)  # makes `import orbax...` fail
    monkeypatch.setitem(sys.modules, "orbax.checkpoint", None)
    with pytest.raises(ImportError, match="orbax-checkpoint"):
        C.OrbaxCheckpoint(str(tmp_path))


def test_orbax_checkpoint_saves_the_state(tmp_path):
    checkpoint = pytest.importorskip("orbax.checkpoint")
    ocp = checkpoint.v1
    x, y = _data()
    model = _model("adam")
    cb = C.OrbaxCheckpoint(str(tmp_path), save_on_background=False, max_to_keep=2)
    model.fit(x, y, epochs=3, batch_size=16, verbose=0, callbacks=[cb])
    assert sorted(os.listdir(tmp_path)) == ["1", "2"]
    with ocp.Context():
        loaded = ocp.load_checkpointables(str(tmp_path / "2"),
                                          {"pytree": None, "model_config": None})
    tree = loaded["pytree"]["trainable_variables"]
    saved = [tree[v.name.split("/")[0]][v.name.split("/")[1]] for v in model.trainable_weights]
    for a, b in zip(saved, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert json.loads(loaded["model_config"]["config"])["class_name"] == "Sequential"
    with pytest.raises(ValueError, match="save_freq"):
        C.OrbaxCheckpoint(str(tmp_path), save_freq="batch")
