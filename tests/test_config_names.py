"""Keras 3.15's ``keras.config`` names in kiln.config: each setting's value, its refusals (by
their messages) and its effect (losses read epsilon, fit honours the caps, progress output
follows the interactive-logging switch, loading follows enable_unsafe_deserialization)."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

import kiln
from kiln import config


@pytest.fixture(autouse=True)
def _restore_config():
    saved = dict(config._STATE)
    yield
    config._STATE.clear()
    config._STATE.update(saved)


def _model(seed=0):
    kiln.utils.set_random_seed(seed)
    model = kiln.Sequential([kiln.Input((3,)), kiln.layers.Dense(2)])
    model.compile("sgd", "mse")
    return model


def _data(n=32):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 3)).astype("float32"), rng.normal(size=(n, 2)).astype("float32")


# ---- backend -------------------------------------------------------------------------------------
def test_backend_is_kiln_and_set_backend_refuses_others():
    assert config.backend() == "kiln"
    config.set_backend("kiln")
    assert config.backend() == "kiln"
    with pytest.raises(ValueError, match=r"backend must be 'kiln', received 'jax'"):
        config.set_backend("jax")


# ---- epsilon -------------------------------------------------------------------------------------
def test_epsilon_default_and_setter():
    assert config.epsilon() == 1e-7
    config.set_epsilon(1e-5)
    assert config.epsilon() == 1e-5
    for bad in (0, -1e-3, "small", True, 0.7):
        with pytest.raises(ValueError, match="set_epsilon: value must be a number in"):
            config.set_epsilon(bad)


def test_losses_read_epsilon_when_called():
    """MAPE divides by max(|y_true|, epsilon) and binary cross-entropy clips to
    [epsilon, 1 - epsilon] (Keras' backend.epsilon()): closed forms for both settings."""
    y_true, y_pred = np.array([[0.0]], "float32"), np.array([[1.0]], "float32")
    mape = kiln.losses.mean_absolute_percentage_error
    np.testing.assert_allclose(mape(y_true, y_pred), [100.0 / 1e-7], rtol=1e-5)
    bce = kiln.losses.binary_crossentropy
    ones, zeros = np.ones((1, 1), "float32"), np.zeros((1, 1), "float32")
    np.testing.assert_allclose(bce(ones, zeros), [-np.log(1e-7)], rtol=1e-4)
    config.set_epsilon(1e-3)
    np.testing.assert_allclose(mape(y_true, y_pred), [100.0 / 1e-3], rtol=1e-5)
    np.testing.assert_allclose(bce(ones, zeros), [-np.log(1e-3)], rtol=1e-4)


def test_constraints_read_epsilon():
    """UnitNorm divides by epsilon + norm (Keras' backend.epsilon())."""
    w = np.array([[3.0], [4.0]], "float32")

    def projected():
        p = kiln.placeholder((2, 1))
        return kiln.function([p], kiln.constraints.UnitNorm(axis=0)(p))(w)

    np.testing.assert_allclose(projected(), w / (5.0 + 1e-7), rtol=1e-6)
    config.set_epsilon(0.25)
    np.testing.assert_allclose(projected(), w / 5.25, rtol=1e-6)


# ---- image data format ---------------------------------------------------------------------------
def test_image_data_format_is_channels_last_unless_set():
    assert config.image_data_format() == "channels_last"
    config.set_image_data_format("channels_last")
    config.set_image_data_format("CHANNELS_LAST")
    try:
        config.set_image_data_format("channels_first")
        assert config.image_data_format() == "channels_first"
    finally:
        config.set_image_data_format("channels_last")
    with pytest.raises(ValueError, match="must be one of .* received 'nhwc'"):
        config.set_image_data_format("nhwc")
    assert config.image_data_format() == "channels_last"


# ---- dtype policy --------------------------------------------------------------------------------
def test_dtype_policy_default_and_float_policies():
    policy = config.dtype_policy()
    assert isinstance(policy, config.DTypePolicy)
    assert (policy.name, policy.compute_dtype, policy.variable_dtype) == ("float32",) * 3
    assert policy.quantization_mode is None
    config.set_dtype_policy("float32")
    assert config.dtype_policy() == config.DTypePolicy("float32")
    same = config.DTypePolicy.from_config(policy.get_config())
    assert same == policy and repr(same) == '<DTypePolicy "float32">'
    assert config.FloatDTypePolicy("float64").compute_dtype == "float64"
    assert kiln.DTypePolicy is config.DTypePolicy
    assert kiln.FloatDTypePolicy is config.FloatDTypePolicy


def test_a_layer_takes_a_dtype_policy():
    layer = kiln.layers.Dense(2, dtype=kiln.DTypePolicy("float64"))
    out = layer(np.ones((1, 3)))
    assert layer.dtype == "float64" and layer.kernel.dtype == "float64"
    assert np.asarray(out).dtype == np.float64


@pytest.mark.parametrize("name", ["mixed_float16", "mixed_bfloat16", "bfloat16", "int8"])
def test_dtype_policy_refuses_what_kiln_cannot_compute(name):
    with pytest.raises(ValueError, match=f"float32 or float64 only .* name='{name}'"):
        config.set_dtype_policy(name)
    assert config.dtype_policy().name == "float32"


def test_set_dtype_policy_needs_floatx_and_a_policy():
    with pytest.raises(ValueError, match=r"compute in floatx\(\) \('float32'\); received "
                                         r"policy 'float64'"):
        config.set_dtype_policy("float64")
    with pytest.raises(ValueError, match="expected the name of a policy .* received policy=3"):
        config.set_dtype_policy(3)


# ---- interactive logging -------------------------------------------------------------------------
def test_fit_output_goes_to_logging_when_interactive_logging_is_off(capsys, caplog):
    x, y = _data()
    model = _model()
    model.fit(x, y, epochs=1, batch_size=16, verbose=2)
    assert "Epoch 1/1" in capsys.readouterr().out
    config.disable_interactive_logging()
    assert not config.is_interactive_logging_enabled()
    assert not kiln.utils.is_interactive_logging_enabled()  # one switch, two names
    with caplog.at_level(logging.INFO, logger="kiln"):
        model.fit(x, y, epochs=1, batch_size=16, verbose=2)
    assert "Epoch 1/1" not in capsys.readouterr().out
    assert any("Epoch 1/1" in r.getMessage() and "loss" in r.getMessage()
               for r in caplog.records if r.name == "kiln")
    kiln.utils.enable_interactive_logging()
    assert config.is_interactive_logging_enabled()


# ---- recorded switches ---------------------------------------------------------------------------
def test_traceback_flash_attention_and_nnx_switches():
    assert config.is_traceback_filtering_enabled() is True
    config.disable_traceback_filtering()
    assert config.is_traceback_filtering_enabled() is False
    config.enable_traceback_filtering()
    assert config.is_traceback_filtering_enabled() is True
    assert config.is_flash_attention_enabled() is None  # Keras' default: "when available"
    config.disable_flash_attention()
    assert config.is_flash_attention_enabled() is False
    config.enable_flash_attention()
    assert config.is_flash_attention_enabled() is None
    assert config.is_nnx_enabled() is False


# ---- unsafe deserialization ----------------------------------------------------------------------
def test_enable_unsafe_deserialization_makes_loads_behave_as_safe_mode_false(tmp_path):
    model = kiln.Sequential([kiln.Input((3,)), kiln.layers.Lambda(lambda t: t * 2.0)])
    path = tmp_path / "lam.keras"
    with pytest.warns(UserWarning, match="Lambda"):
        model.save(path)
    with pytest.raises(ValueError, match="Lambda layer.*safe_mode=True refuses"):
        kiln.models.load_model(path)
    assert config.in_safe_mode() is None
    config.enable_unsafe_deserialization()
    assert config.in_safe_mode() is False
    # what safe_mode=False gives: past the safe-mode check, refused because kiln never runs
    # code stored in a file
    with pytest.raises(ValueError, match="never executes stored code, even with safe_mode"):
        kiln.models.load_model(path)


# ---- fit caps ------------------------------------------------------------------------------------
class _Count(kiln.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = []

    def on_epoch_begin(self, epoch, logs=None):
        self.batches.append(0)

    def on_train_batch_end(self, batch, logs=None):
        self.batches[-1] += 1


def test_max_epochs_and_max_steps_per_epoch_cap_fit():
    x, y = _data(64)  # 8 steps of 8
    assert config.max_epochs() is None and config.max_steps_per_epoch() is None
    config.set_max_epochs(2)
    config.set_max_steps_per_epoch(3)
    assert (config.max_epochs(), config.max_steps_per_epoch()) == (2, 3)
    count = _Count()
    with pytest.warns(UserWarning) as record:
        history = _model().fit(x, y, epochs=5, batch_size=8, verbose=0, callbacks=[count])
    messages = {str(w.message) for w in record}
    assert {"Limiting epochs to 2", "Limiting steps_per_epoch to 3"} <= messages
    assert len(history.history["loss"]) == 2
    assert count.batches == [3, 3]
    # a request under the caps is left alone, without a warning; None lifts a cap
    config.set_max_steps_per_epoch(5)
    count = _Count()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _model().fit(x, y, epochs=2, batch_size=8, steps_per_epoch=4, verbose=0,
                     callbacks=[count])
        config.set_max_steps_per_epoch(None)
        _model().fit(x, y, epochs=1, batch_size=8, verbose=0, callbacks=[count])
    assert count.batches == [4, 4, 8]
    # a cap above the data's own steps: the epoch ends with its data (8 steps), no cycling
    config.set_max_steps_per_epoch(50)
    count = _Count()
    with pytest.warns(UserWarning, match="Limiting steps_per_epoch to 50"):
        _model().fit(x, y, epochs=2, batch_size=8, verbose=0, callbacks=[count])
    assert count.batches == [8, 8]


def test_fit_caps_from_the_environment_and_refusals(monkeypatch):
    monkeypatch.setenv("KERAS_MAX_EPOCHS", "4")
    assert config.max_epochs() == 4
    monkeypatch.setenv("KILN_MAX_EPOCHS", "3")
    assert config.max_epochs() == 3  # kiln's variable first
    config.set_max_epochs(1)
    assert config.max_epochs() == 1  # the setter over the environment
    monkeypatch.setenv("KILN_MAX_STEPS_PER_EPOCH", "0")
    with pytest.raises(ValueError, match="KILN_MAX_STEPS_PER_EPOCH must be a positive integer"):
        config.max_steps_per_epoch()
    for bad in (0, -2, 1.5, True, "3"):
        with pytest.raises(ValueError, match="set_max_epochs: expected a positive integer"):
            config.set_max_epochs(bad)


def test_max_steps_per_epoch_caps_evaluate_and_predict_like_keras():
    """Keras' epoch iterator caps every loop, fit's validation included: the first ``cap``
    batches, with the same warning."""
    x, y = _data(64)  # 8 steps of 8
    model = _model()
    want = model.evaluate(x[:24], y[:24], batch_size=8, verbose=0)
    config.set_max_steps_per_epoch(3)
    try:
        with pytest.warns(UserWarning, match="Limiting steps_per_epoch to 3"):
            got = model.evaluate(x, y, batch_size=8, verbose=0)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        with pytest.warns(UserWarning, match="Limiting steps_per_epoch to 3"):
            assert model.predict(x, batch_size=8, verbose=0).shape[0] == 24
        with pytest.warns(UserWarning, match="Limiting steps_per_epoch to 3"):
            assert model.predict(x, batch_size=8, steps=5, verbose=0).shape[0] == 24
        with warnings.catch_warnings():  # under the cap: untouched, no warning
            warnings.simplefilter("error")
            assert model.predict(x, batch_size=8, steps=2, verbose=0).shape[0] == 16
    finally:
        config.set_max_steps_per_epoch(None)
