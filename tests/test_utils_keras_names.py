"""kiln.utils' small Keras names (Config, clear_session, is_keras_tensor, get_source_inputs,
pack/unpack_x_y_sample_weight, standardize_dtype, interactive logging, model_to_dot, Progbar)
against Keras' documented behaviour or Keras itself, and the loss functions keras.metrics
exports."""

from __future__ import annotations

import importlib.util
import logging

import numpy as np
import pytest

import kiln
import kiln.utils as U


def test_config_attribute_and_item_access_freeze_and_json():
    config = U.Config(learning_rate=0.1, momentum=0.9)
    config.use_ema = True
    config["seed"] = 123
    assert config.seed == 123 and config["learning_rate"] == 0.1 and config.use_ema
    assert list(config) == ["learning_rate", "momentum", "seed", "use_ema"]  # sorted keys
    assert len(config) == 4 and "seed" in config
    assert config.as_dict() == {"learning_rate": 0.1, "momentum": 0.9, "use_ema": True,
                                "seed": 123}
    assert config.to_json() == ('{"learning_rate": 0.1, "momentum": 0.9, "use_ema": true, '
                                '"seed": 123}')
    with pytest.raises(AttributeError, match="Unknown attribute: 'momentun'. Did you mean "
                                             "'momentum'"):
        _ = config.momentun
    config.freeze()
    assert config.frozen
    for mutate in (lambda: setattr(config, "foo", 1), lambda: config.update(a=1),
                   lambda: config.pop("seed"), lambda: config.__delitem__("seed"),
                   lambda: config.__setitem__("seed", 1)):
        with pytest.raises(ValueError, match="frozen"):
            mutate()
    config.unfreeze()
    config.foo = "bar"
    assert config.get("foo") == "bar" and config.get("missing", 7) == 7


def test_clear_session_restarts_layer_names():
    kiln.layers.Dense(1)
    kiln.layers.Dense(1)
    U.clear_session()
    assert kiln.layers.Dense(1).name == "dense"
    assert kiln.layers.Dense(1).name == "dense_1"
    U.clear_session(free_memory=False)
    assert kiln.layers.Dense(1).name == "dense"


def test_is_keras_tensor_and_get_source_inputs():
    a, b = kiln.Input((3,), name="a"), kiln.Input((3,), name="b")
    h = kiln.layers.Dense(2)(a)
    out = kiln.layers.Add()([h, kiln.layers.Dense(2)(b)])
    assert U.is_keras_tensor(a) and U.is_keras_tensor(out)
    assert not U.is_keras_tensor(np.zeros(3)) and not U.is_keras_tensor(1.0)
    assert U.get_source_inputs(out) == [a, b]
    assert U.get_source_inputs(h) == [a]
    assert U.get_source_inputs(a) == [a]
    with pytest.raises(TypeError, match="get_source_inputs: expected a symbolic tensor"):
        U.get_source_inputs(np.zeros(3))


def test_pack_and_unpack_x_y_sample_weight():
    x, y, w = np.zeros(2), np.ones(2), np.full(2, 2.0)
    assert U.pack_x_y_sample_weight(x) is x
    assert U.pack_x_y_sample_weight((x, y)) == ((x, y),)  # a tuple x stays one element
    assert U.pack_x_y_sample_weight(x, y) == (x, y)
    assert U.pack_x_y_sample_weight(x, y, w) == (x, y, w)
    assert U.unpack_x_y_sample_weight((x, y, w)) == (x, y, w)
    assert U.unpack_x_y_sample_weight((x, y)) == (x, y, None)
    assert U.unpack_x_y_sample_weight([x]) == (x, None, None)
    assert U.unpack_x_y_sample_weight(x) == (x, None, None)
    with pytest.raises(ValueError, match="found a tuple of 4 items"):
        U.unpack_x_y_sample_weight((x, y, w, w))


@pytest.mark.parametrize("dtype, expected", [
    (None, "float32"), ("float16", "float16"), (float, "float32"), (bool, "bool"),
    (np.float64, "float64"), (np.dtype("int8"), "int8"), ("int", "int32"), (int, "int32"),
    (str, "string"), ("bfloat16", "bfloat16")])
def test_standardize_dtype(dtype, expected):
    assert U.standardize_dtype(dtype) == expected


def test_standardize_dtype_agrees_with_keras_and_refuses_unknown():
    with pytest.raises(ValueError, match="Invalid dtype: float128x"):
        U.standardize_dtype("float128x")
    keras = pytest.importorskip("keras")
    for d in (None, "float16", float, bool, np.float64, np.dtype("uint16"), "complex128"):
        assert U.standardize_dtype(d) == keras.utils.standardize_dtype(d)
    torch = pytest.importorskip("torch")
    assert U.standardize_dtype(torch.float16) == "float16"


def test_interactive_logging_switch_routes_progress_to_the_logger(capsys, caplog):
    assert U.is_interactive_logging_enabled()
    U.disable_interactive_logging()
    try:
        assert not U.is_interactive_logging_enabled()
        with caplog.at_level(logging.INFO, logger="kiln"):
            bar = U.Progbar(2, verbose=2)
            bar.update(1, [("loss", 1.0)])
            bar.update(2, [("loss", 3.0)])
        assert capsys.readouterr().out == ""
        assert any("loss: 3.0000" in r.getMessage() for r in caplog.records)
    finally:
        U.enable_interactive_logging()
    assert U.is_interactive_logging_enabled()


def test_model_to_dot_without_pydot_names_the_alternative():
    inputs = kiln.Input((3,))
    model = kiln.Model(inputs, kiln.layers.Dense(2)(inputs))
    with pytest.raises(ValueError, match="subgraph=True is not supported"):
        U.model_to_dot(model, subgraph=True)
    if importlib.util.find_spec("pydot") is None:
        with pytest.raises(ImportError, match="pydot package is not installed.*"
                                              "kiln.utils.plot.model_to_dot"):
            U.model_to_dot(model)
    else:
        dot = U.model_to_dot(model, show_shapes=True)
        assert type(dot).__name__ == "Dot" and model.layers[-1].name in dot.to_string()


# ---- Progbar --------------------------------------------------------------------------------
def test_progbar_averages_weighted_by_steps_and_keeps_stateful_values(capsys):
    bar = U.Progbar(10, verbose=0, stateful_metrics=["acc"])
    bar.update(2, [("loss", 1.0), ("acc", 0.1)])  # covers 2 steps
    bar.update(5, [("loss", 2.0), ("acc", 0.5)])  # covers 3 steps
    assert bar.value("loss") == pytest.approx((1.0 * 2 + 2.0 * 3) / 5)
    assert bar.value("acc") == pytest.approx(0.5)
    bar.add(5, [("loss", 4.0)])  # reaches the target: a final value is shown as given
    assert bar.value("loss") == pytest.approx(4.0)
    assert capsys.readouterr().out == ""  # verbose=0


def test_progbar_stateless_metrics_and_argument_errors():
    bar = U.Progbar(4, verbose=0, stateless_metrics=["loss"])
    bar.update(1, [("loss", 2.0), ("lr", 0.1)])
    bar.update(2, [("loss", 4.0), ("lr", 0.2)])
    assert bar.value("loss") == pytest.approx(3.0) and bar.value("lr") == pytest.approx(0.2)
    with pytest.raises(ValueError, match="only one of stateful_metrics"):
        U.Progbar(3, stateful_metrics=["a"], stateless_metrics=["b"])
    with pytest.raises(ValueError, match="verbose must be 0, 1 or 2"):
        U.Progbar(3, verbose=3)


def test_progbar_text(capsys):
    bar = U.Progbar(4, width=8, verbose=1, interval=0)
    for i in range(4):
        bar.update(i + 1, [("loss", float(i + 1))])
    out = capsys.readouterr().out
    last = out.rstrip().replace("\r", "\n").splitlines()[-1].rstrip()
    assert last.startswith("4/4 [========]") and last.endswith("loss: 4.0000")  # final value
    assert "2/4 [===>....] - ETA: " in out and "loss: 1.5000" in out  # (1 + 2) / 2
    bar = U.Progbar(None, verbose=1, interval=0)
    bar.add(3, [("x", 2.0)])
    assert "3/Unknown" in capsys.readouterr().out
    bar = U.Progbar(3, verbose=2, unit_name="sample")
    bar.update(1, [("loss", 1.0)])
    assert capsys.readouterr().out == ""  # verbose=2 prints at the end only
    bar.update(3, [("loss", 0.5)])
    line = capsys.readouterr().out
    assert line.startswith("3/3 - ") and "/sample - loss: 0.5000" in line


def test_progbar_values_match_keras():
    keras = pytest.importorskip("keras")
    updates = [(1, [("loss", 3.0), ("acc", 0.2)]), (4, [("loss", 1.0), ("acc", 0.6)]),
               (6, [("loss", 0.5), ("acc", 0.7)])]
    ours = U.Progbar(10, verbose=0, stateful_metrics=["acc"])
    theirs = keras.utils.Progbar(10, verbose=0, stateful_metrics=["acc"])
    for current, values in updates:
        ours.update(current, values)
        theirs.update(current, values)
    for name in ("loss", "acc"):
        total, count = theirs._values[name]
        assert ours.value(name) == pytest.approx(float(total) / max(1, count))


# ---- keras.metrics' function forms ------------------------------------------------------------
def test_metrics_namespace_exports_the_loss_functions():
    names = ["binary_crossentropy", "binary_focal_crossentropy", "categorical_crossentropy",
             "categorical_focal_crossentropy", "categorical_hinge", "hinge", "huber",
             "kl_divergence", "log_cosh", "mean_absolute_error",
             "mean_absolute_percentage_error", "mean_squared_error",
             "mean_squared_logarithmic_error", "poisson", "sparse_categorical_crossentropy",
             "squared_hinge"]
    for name in names:
        assert getattr(kiln.metrics, name) is getattr(kiln.losses, name), name
    y = np.array([[0.0, 1.0], [1.0, 3.0]], "float32")
    p = np.array([[1.0, 1.0], [2.0, 1.0]], "float32")
    np.testing.assert_allclose(np.asarray(kiln.metrics.mean_squared_error(y, p)),
                               np.mean((y - p) ** 2, axis=-1), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.metrics.mean_absolute_error(y, p)),
                               np.mean(np.abs(y - p), axis=-1), rtol=1e-6)
