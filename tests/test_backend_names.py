"""Keras 3.15's ``keras.backend`` names (kiln.backend) and the top-level ``keras`` helpers kiln
adds (kiln/scopes.py, ``kiln.DTypePolicy``, ``kiln.models.save_model``).

Oracles: Keras' documented promotion examples and its lattice (checked live against
``keras.backend.result_type`` where Keras is installed), closed-form uid counters, NumPy."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
from kiln import backend as B
from kiln import config

KERAS_NAMES = ["backend", "clear_session", "epsilon", "floatx", "get_uid", "image_data_format",
               "is_float_dtype", "is_int_dtype", "is_keras_tensor", "result_type",
               "set_epsilon", "set_floatx", "set_image_data_format", "standardize_dtype"]


def test_the_fourteen_names_and_one_state_with_kiln_config():
    assert all(callable(getattr(B, n)) for n in KERAS_NAMES)
    assert sorted(B.__all__) == sorted(KERAS_NAMES)
    assert B.backend() == "kiln"
    saved = config.epsilon()
    try:
        B.set_epsilon(1e-4)
        assert config.epsilon() == 1e-4 == B.epsilon()
    finally:
        config.set_epsilon(saved)
    assert B.floatx() == config.floatx() == "float32"
    assert B.image_data_format() == "channels_last"
    try:
        B.set_image_data_format("channels_first")
        assert config.image_data_format() == "channels_first"
    finally:
        B.set_image_data_format("channels_last")
    with pytest.raises(ValueError, match="received 'nchw'"):
        B.set_image_data_format("nchw")


# Keras' examples and lattice: (dtypes, result); kiln keeps int64 and float64 (as Keras on
# TensorFlow), where Keras on JAX narrows them to 32 bits.
PROMOTIONS = [
    (("int32", "float32"), "float32"), (("int8", "uint8"), "int16"),
    (("uint8", "uint16"), "uint16"), (("int16", "uint16"), "int32"),
    (("bool", "int32"), "int32"), (("bool", "bool"), "bool"),
    ((int, "int8"), "int8"), ((float, "float16"), "float16"), ((float, "int32"), "float32"),
    ((int, "bool"), "int32"), ((int, float), "float32"), (("bfloat16", "float16"), "float32"),
    (("float16", "int64"), "float16"), (("float64", "float32"), "float64"),
    (("uint32", "int32"), "int64"), (("int64", "uint64"), "float32"),
    ((None, "int8"), "float32"), ((), "float32"), (("float32",), "float32"),
    ((np.float64, "int32"), "float64"),
]


@pytest.mark.parametrize("dtypes, expected", PROMOTIONS)
def test_result_type_follows_keras_lattice(dtypes, expected):
    assert B.result_type(*dtypes) == expected


def test_result_type_refuses_float8_and_unknown_dtypes():
    with pytest.raises(ValueError, match="no implicit conversion from float8"):
        B.result_type("float8_e4m3fn", "float32")
    with pytest.raises(ValueError, match="Invalid dtype: quux"):
        B.result_type("quux", "float32")


def test_result_type_matches_keras_live():
    """Every pair of dtypes up to 32 bits against Keras' own ``result_type`` (on whatever
    backend it runs: below 64 bits the backends agree)."""
    keras = pytest.importorskip("keras")
    dtypes = ["bool", "uint8", "uint16", "int8", "int16", "int32", "bfloat16", "float16",
              "float32", int, float]
    checked = 0
    for a in dtypes:
        for b in dtypes:
            want = keras.backend.result_type(a, b)
            if "64" in want or int in (a, b) and keras.config.backend() == "tensorflow":
                continue  # Keras on TensorFlow reads Python ints as int64
            assert B.result_type(a, b) == want, (a, b)
            checked += 1
    assert checked >= 81


@pytest.mark.parametrize("dtype, is_float, is_int", [
    ("float32", True, False), ("bfloat16", True, False), (np.float16, True, False),
    (float, True, False), ("int8", False, True), ("uint32", False, True), (int, False, True),
    ("bool", False, False), ("complex64", False, False), (None, True, False),
])
def test_is_float_and_is_int_dtype(dtype, is_float, is_int):
    assert B.is_float_dtype(dtype) is is_float
    assert B.is_int_dtype(dtype) is is_int


def test_standardize_dtype_and_is_keras_tensor():
    assert B.standardize_dtype(None) == "float32"
    assert B.standardize_dtype(np.int64) == "int64" and B.standardize_dtype(bool) == "bool"
    with pytest.raises(ValueError, match="Invalid dtype"):
        B.standardize_dtype("float31")
    assert B.is_keras_tensor(kiln.Input((3,)))
    assert not B.is_keras_tensor(np.zeros(3))


def test_get_uid_shares_the_layer_name_counters_and_clear_session_resets_them():
    B.clear_session()
    assert [B.get_uid("my_prefix") for _ in range(3)] == [1, 2, 3]
    assert kiln.layers.Dense(2).name == "dense"
    assert B.get_uid("dense") == 2  # Keras: the first Dense took uid 1
    assert kiln.layers.Dense(2).name == "dense_2"
    B.clear_session()
    assert B.get_uid("my_prefix") == 1
    assert kiln.layers.Dense(2).name == "dense"


# ---- top-level helpers -----------------------------------------------------------------------
def test_version_and_policies_at_the_top_level():
    assert kiln.version() == kiln.__version__
    assert kiln.DTypePolicy("float32").compute_dtype == "float32"
    assert kiln.InputSpec is kiln.layers.InputSpec


def test_device_scope_sets_kiln_device_and_restores_it(monkeypatch):
    monkeypatch.delenv("KILN_DEVICE", raising=False)
    assert config.device() == "cpu"
    with kiln.device("gpu:0"):
        assert config.device() == "cuda"
        with kiln.device("cpu:0"):
            assert config.device() == "cpu"
        assert config.device() == "cuda"
    assert config.device() == "cpu"
    with kiln.device("/device:CPU:0"):
        assert config.device() == "cpu"
    with pytest.raises(ValueError, match="unknown device 'tpu:0'"):
        kiln.device("tpu:0")


def test_eager_calls_inside_a_cpu_device_scope():
    x = np.arange(6, dtype="float32").reshape(2, 3)
    with kiln.device("cpu"):
        np.testing.assert_allclose(kiln.ops.sum(x * x), np.sum(x * x))


def test_name_scope_paths():
    from kiln.scopes import current_path

    assert current_path() == ""
    owner = object()
    with kiln.name_scope("outer", caller=owner):
        with kiln.name_scope("outer", caller=owner):  # deduplicated
            assert current_path() == "outer"
        with kiln.name_scope("inner"):
            assert current_path() == "outer/inner"
            with kiln.name_scope("x", override_parent="root/a"):
                assert current_path() == "root/a/x"
    assert current_path() == ""
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        kiln.name_scope("")


def test_remat_keeps_values_and_remat_scope_checks_its_mode():
    def f(x):
        return kiln.ops.tanh(x) * 3.0

    x = np.linspace(-2, 2, 7).astype("float32")
    np.testing.assert_allclose(kiln.remat(f)(x), np.tanh(x) * 3.0, rtol=1e-6)
    with kiln.RematScope(mode="larger_than", output_size_threshold=10) as scope:
        assert scope.output_size_threshold == 10
        np.testing.assert_allclose(f(x), np.tanh(x) * 3.0, rtol=1e-6)
    with pytest.raises(ValueError, match="RematScope: mode must be one of"):
        kiln.RematScope(mode="half")
    with pytest.raises(ValueError, match="'list_of_layers' needs layer_names"):
        kiln.RematScope(mode="list_of_layers")
    with pytest.raises(TypeError, match="expected a callable"):
        kiln.remat(3)


def test_stateless_scope_is_refused_and_symbolic_scope_is_a_no_op():
    with pytest.raises(NotImplementedError, match="StatelessScope is not supported"):
        kiln.StatelessScope()
    with kiln.SymbolicScope():
        x = np.ones(3, "float32")
        np.testing.assert_allclose(kiln.ops.add(x, x), 2 * x)


class _Scale(kiln.Operation):
    def call(self, x):
        return kiln.ops.multiply(x, 2.0)


def test_operation_subclass_runs_eagerly_and_in_a_graph():
    op = _Scale(name="scale")
    x = np.arange(4, dtype="float32")
    np.testing.assert_allclose(op(x), 2 * x)
    p = kiln.placeholder((None, 4))
    out = op(p)
    assert B.is_keras_tensor(out)
    np.testing.assert_allclose(kiln.function([p], out)(x[None])[0], 2 * x)
    assert _Scale.from_config(op.get_config()).name == "scale"
    with pytest.raises(NotImplementedError, match="must implement call"):
        kiln.Operation()(x)


def test_quantizer_base_class():
    class Sign(kiln.Quantizer):
        def __call__(self, x):
            return np.sign(x).astype(self.output_dtype)

    np.testing.assert_array_equal(Sign()(np.array([-2.0, 0.0, 3.0])), [-1, 0, 1])
    assert Sign().output_dtype == "int8"
    with pytest.raises(NotImplementedError, match="must implement __call__"):
        kiln.Quantizer()(np.zeros(2))


def test_models_save_model_writes_a_loadable_keras_file(tmp_path):
    kiln.utils.set_random_seed(0)
    model = kiln.Sequential([kiln.Input((3,)), kiln.layers.Dense(2)])
    path = tmp_path / "m.keras"
    kiln.models.save_model(model, path)
    again = kiln.models.load_model(path)
    x = np.arange(6, dtype="float32").reshape(2, 3)
    np.testing.assert_allclose(again.predict(x, verbose=0), model.predict(x, verbose=0))
    with pytest.raises(FileExistsError):
        kiln.models.save_model(model, path, overwrite=False)
    with pytest.raises(TypeError, match="expected a kiln model"):
        kiln.models.save_model(json, path)
