"""kiln's one class registry (kiln/registry.py, resolved by kiln/saving/registration.py):
resolve_class's lookup order,
register_builtin kept apart from user registrations, and saving never importing models."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from kiln import layers, registry
from kiln.saving.registration import (
    custom_object_scope,
    register_builtin,
    register_serializable,
    registered_objects,
    resolve_class,
)


@pytest.fixture(autouse=True)
def _own_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test stay in that test."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_NAMES", dict(registry._NAMES))
    monkeypatch.setattr(registry, "_BUILTINS", dict(registry._BUILTINS))


class _Mine(layers.Layer):
    pass


def test_kiln_layers_are_built_in():
    assert resolve_class("Dense") is layers.Dense
    assert resolve_class("keras>Conv2D") is layers.Conv2D  # a package prefix falls back


def test_custom_objects_win_over_scope_registry_and_builtins():
    @register_serializable(package="RegTests", name="Dense")
    class Registered(layers.Layer):
        pass

    class Scoped(layers.Layer):
        pass

    class Passed(layers.Layer):
        pass

    with custom_object_scope({"Dense": Scoped}):
        assert resolve_class("Dense", {"Dense": Passed}) is Passed
        assert resolve_class("Dense") is Scoped
    assert resolve_class("Dense") is Registered  # the bare name of one registration
    assert resolve_class("RegTests>Dense") is Registered


def test_registered_names_resolve_with_and_without_package():
    @register_serializable(package="RegTests")
    class Scale(layers.Layer):
        pass

    assert resolve_class("RegTests>Scale") is Scale
    assert resolve_class("Scale") is Scale
    assert resolve_class("OldPackage>Scale") is Scale  # renamed package: the bare name
    assert registered_objects()["RegTests>Scale"] is Scale


def test_register_builtin_is_found_but_not_listed_as_a_user_class():
    class Container:
        pass

    register_builtin("Container", Container)
    assert resolve_class("Container") is Container
    assert resolve_class("keras>Container") is Container
    assert Container not in registered_objects().values()
    with pytest.raises(TypeError):
        register_builtin("Container", "not a class")  # type: ignore[arg-type]


def test_layer_subclasses_are_found_by_name_last_definition_wins():
    assert resolve_class("_Mine") is _Mine

    class Twice(layers.Layer):
        pass

    first = Twice

    class Twice(layers.Layer):  # noqa: F811 - redefined on purpose
        pass

    assert first is not Twice and resolve_class("Twice") is Twice


def test_unknown_names_are_explained():
    with pytest.raises(ValueError, match=r"Unknown layer or model class 'Pkg>Nope'.*"
                       r"custom_objects=\{'Nope': Nope\}.*register_serializable"):
        resolve_class("Pkg>Nope")
    with pytest.raises(TypeError, match="expected a class name"):
        resolve_class(3)  # type: ignore[arg-type]


def test_saving_does_not_import_models():
    code = ("import sys, kiln.saving, kiln.saving.registration as r; "
            "r.resolve_class('Dense'); assert 'kiln.models' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_model_classes_resolve_once_models_is_imported():
    import kiln.models

    assert resolve_class("Sequential") is kiln.models.Sequential
    assert resolve_class("Functional") is kiln.models.Functional
    assert resolve_class("Model") is kiln.models.Model


def test_saving_load_model_is_the_api_one():
    import kiln.saving
    from kiln.saving import api

    assert kiln.saving.load_model is api.load_model
    assert kiln.saving.deserialize_model is api.deserialize_model
    with pytest.raises(AttributeError):
        kiln.saving.no_such_name  # noqa: B018


def test_losses_and_metrics_resolve_registered_names():
    """A loss or metric registered under another name reloads through the one registry."""
    import kiln

    @register_serializable(package="Reg", name="HalfMSE")
    class Half(kiln.losses.MeanSquaredError):
        pass

    @register_serializable(package="Reg", name="CountingMean")
    class Counting(kiln.metrics.Mean):
        pass

    loss = kiln.losses.deserialize({"class_name": "Half", "registered_name": "Reg>HalfMSE",
                                    "config": {}})
    metric = kiln.metrics.deserialize({"class_name": "Counting",
                                       "registered_name": "Reg>CountingMean",
                                       "config": {"name": "m"}})
    assert type(loss) is Half and type(metric) is Counting
    assert loss(np.ones((2, 1)), np.zeros((2, 1))) == pytest.approx(1.0)


def test_building_and_training_a_model_does_not_import_h5py_or_the_network():
    # h5py (~30 ms) and urllib / http.client (~15 ms) are imported where a file is saved or
    # loaded and where a dataset is downloaded, not at every program's start
    code = ("import sys, numpy as np, kiln, kiln.models, kiln.layers, kiln.datasets\n"
            "m = kiln.Sequential([kiln.layers.Input((3,)), kiln.layers.Dense(2)])\n"
            "m.compile('sgd', 'mse')\n"
            "m.fit(np.ones((4, 3), 'float32'), np.ones((4, 2), 'float32'), verbose=0)\n"
            "late = {'h5py', 'urllib.request', 'http.client'} & set(sys.modules)\n"
            "assert not late, late\n"
            "from kiln.saving import h5util\n"
            "assert h5util.require_h5py().__name__ == 'h5py' and 'h5py' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)
