"""plot_model (DOT graph, Graphviz rendering, the error without Graphviz) and plot_history
(matplotlib, and the error without it)."""

from __future__ import annotations

import re
import shutil
import sys

import pytest

import kiln
from kiln import layers
from kiln.layers.base import reset_names
from kiln.utils import plot

NODE = re.compile(r'^\s*"((?:[^"\\]|\\.)*)" \[label=<(.*)>\];$', re.M)
EDGE = re.compile(r'^\s*"((?:[^"\\]|\\.)*)" -> "((?:[^"\\]|\\.)*)";$', re.M)
HAS_DOT = shutil.which("dot") is not None


@pytest.fixture(autouse=True)
def _fresh_names():
    reset_names()
    kiln.utils.set_random_seed(7)


def parse_dot(text: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """``{node name: label}`` and the list of edges of a DOT file written by plot_model."""
    nodes = {m.group(1): m.group(2) for m in NODE.finditer(text)}
    edges = [(m.group(1), m.group(2)) for m in EDGE.finditer(text)]
    return nodes, edges


def convnet() -> kiln.Model:
    return kiln.Sequential([
        kiln.Input((28, 28, 1)),
        layers.Conv2D(32, 3, activation="relu"),
        layers.MaxPooling2D(2),
        layers.Conv2D(64, 3, activation="relu"),
        layers.MaxPooling2D(2),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(10, activation="softmax"),
    ])


def two_towers() -> kiln.Model:
    """Two inputs, a shared Dense, a merge and two outputs."""
    a = kiln.Input((8,), name="a")
    b = kiln.Input((8,), name="b")
    shared = layers.Dense(4, name="shared")
    merged = layers.Add(name="add")([shared(a), shared(b)])
    out1 = layers.Dense(1, name="out1")(merged)
    out2 = layers.Dense(3, name="out2")(layers.Dense(5, name="hidden")(merged))
    return kiln.Model([a, b], [out1, out2])


def no_temp_files(folder) -> bool:
    return not [p for p in folder.iterdir() if p.name.endswith(".kiln-tmp")]


def test_convnet_dot_has_one_node_per_layer_and_a_chain_of_edges(tmp_path):
    model = convnet()
    path = plot.plot_model(model, tmp_path / "convnet.dot", show_shapes=True)
    assert path == str(tmp_path / "convnet.dot")
    nodes, edges = parse_dot((tmp_path / "convnet.dot").read_text())
    expected = ["input_layer"] + [layer.name for layer in model.layers]
    assert len(expected) == 8
    assert list(nodes) == expected
    assert edges == list(zip(expected[:-1], expected[1:]))
    assert "(None, 26, 26, 32)" in nodes["conv2d"]
    assert "(None, 28, 28, 1)" in nodes["conv2d"]          # input shape too
    assert "(None, 10)" in nodes["dense"]
    assert "Conv2D" in nodes["conv2d"] and "MaxPooling2D" in nodes["max_pooling2d"]
    assert [p.name for p in tmp_path.iterdir()] == ["convnet.dot"]


def test_functional_graph_edges_follow_the_layer_calls(tmp_path):
    model = two_towers()
    text = plot.model_to_dot(model)
    nodes, edges = parse_dot(text)
    assert set(nodes) == {"a", "b", "shared", "add", "out1", "hidden", "out2"}
    assert sorted(edges) == sorted([("a", "shared"), ("b", "shared"), ("shared", "add"),
                                    ("add", "out1"), ("add", "hidden"), ("hidden", "out2")])
    assert "[(None, 4), (None, 4)]" in nodes["add"]        # two inputs


def test_options_change_the_labels():
    model = two_towers()
    plain, _ = parse_dot(plot.model_to_dot(model, show_shapes=False, show_layer_names=False))
    assert "(None" not in plain["add"] and "<b>Add</b>" in plain["add"]
    typed, _ = parse_dot(plot.model_to_dot(model, show_dtype=True))
    assert "float32" in typed["hidden"]
    assert "rankdir=LR" in plot.model_to_dot(model, rankdir="LR")
    with pytest.raises(ValueError, match="rankdir"):
        plot.model_to_dot(model, rankdir="sideways")


def test_raw_ops_between_layers_are_nodes():
    x = kiln.Input((4,), name="x")
    h = layers.Dense(4, name="d1")(x)
    y = layers.Dense(2, name="d2")(h * 2.0 + 1.0)
    nodes, edges = parse_dot(plot.model_to_dot(kiln.Model(x, y)))
    ops = [n for n in nodes if n.startswith("op:")]
    assert len(ops) == 2  # the multiply and the add
    chain = dict(edges)
    assert chain["x"] == "d1"
    assert chain[chain[chain["d1"]]] == "d2"


def test_sequential_without_input_is_a_chain():
    model = kiln.Sequential([layers.Dense(3), layers.Dense(2)])
    nodes, edges = parse_dot(plot.model_to_dot(model))
    assert list(nodes) == ["dense", "dense_1"]
    assert edges == [("dense", "dense_1")]


class Residual(kiln.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = layers.Dense(6, name="inner")
        self.outer = layers.Dense(6, name="outer")
        self.merge = layers.Add(name="merge")

    def call(self, x, training=None):
        return self.merge([x, self.outer(self.inner(x))])


def test_subclassed_model_is_traced_and_leaves_no_call_records():
    model = Residual()
    with pytest.raises(ValueError, match="not built"):
        plot.model_to_dot(model)
    model.build((None, 6))
    before = [len(layer._inbound) for layer in (model, model.inner, model.outer, model.merge)]
    nodes, edges = parse_dot(plot.model_to_dot(model))
    assert {"inner", "outer", "merge"} <= set(nodes)
    (source,) = set(nodes) - {"inner", "outer", "merge"}
    assert sorted(edges) == sorted([(source, "inner"), (source, "merge"), ("inner", "outer"),
                                    ("outer", "merge")])
    after = [len(layer._inbound) for layer in (model, model.inner, model.outer, model.merge)]
    assert after == before


@pytest.mark.skipif(not HAS_DOT, reason="Graphviz's dot is not installed")
@pytest.mark.parametrize("ext, magic", [(".png", b"\x89PNG"), (".svg", b"<svg")])
def test_graphviz_renders_the_picture(tmp_path, ext, magic):
    out = plot.plot_model(convnet(), tmp_path / f"model{ext}", dpi=50)
    assert out == str(tmp_path / f"model{ext}")
    data = (tmp_path / f"model{ext}").read_bytes()
    assert magic in data[:2000]
    assert (tmp_path / "model.dot").is_file()
    assert no_temp_files(tmp_path)


@pytest.mark.skipif(not HAS_DOT, reason="Graphviz's dot is not installed")
def test_no_extension_means_png(tmp_path):
    out = plot.plot_model(convnet(), tmp_path / "model")
    assert out.endswith("model.png")
    assert (tmp_path / "model.png").read_bytes()[:4] == b"\x89PNG"


def test_missing_dot_is_a_clear_error_and_the_dot_file_is_still_written(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(plot.shutil, "which", lambda name: None)
    with pytest.raises(plot.GraphvizNotFoundError) as info:
        plot.plot_model(convnet(), tmp_path / "model.png")
    message = str(info.value)
    assert "`dot`" in message and "apt-get install graphviz" in message
    assert str(tmp_path / "model.dot") in message
    assert (tmp_path / "model.dot").is_file()
    assert not (tmp_path / "model.png").exists()
    assert isinstance(info.value, RuntimeError)


HISTORY = {"loss": [0.9, 0.5, 0.3], "accuracy": [0.7, 0.85, 0.9],
           "val_loss": [0.8, 0.6, 0.5], "val_accuracy": [0.75, 0.8, 0.83],
           "learning_rate": [1e-3, 1e-3, 1e-3]}


def test_plot_history_draws_png_and_svg(tmp_path):
    pytest.importorskip("matplotlib")
    out = plot.plot_history(HISTORY, tmp_path / "curves.png")
    assert out == str(tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    history = kiln.callbacks.History()
    history.history, history.epoch = dict(HISTORY), [0, 1, 2]
    plot.plot_history(history, tmp_path / "curves.svg", metrics=["accuracy"])
    assert b"<svg" in (tmp_path / "curves.svg").read_bytes()[:2000]
    assert no_temp_files(tmp_path)
    with pytest.raises(ValueError, match="not in the history"):
        plot.plot_history(HISTORY, tmp_path / "x.png", metrics=["auc"])
    with pytest.raises(ValueError, match="empty"):
        plot.plot_history({}, tmp_path / "x.png")
    with pytest.raises(TypeError, match="History"):
        plot.plot_history([1, 2], tmp_path / "x.png")


def test_plot_history_without_matplotlib_says_how_to_install_it(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError) as info:
        plot.plot_history(HISTORY, tmp_path / "curves.png")
    assert "matplotlib" in str(info.value)
    assert 'pip install "kiln-nn[viz]"' in str(info.value)
    assert not (tmp_path / "curves.png").exists()


def test_plot_history_of_a_real_fit(tmp_path):
    pytest.importorskip("matplotlib")
    import numpy as np

    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    model = kiln.Sequential([kiln.Input((4,)), layers.Dense(2, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, epochs=2, batch_size=32, validation_split=0.25, verbose=0)
    plot.plot_history(history, tmp_path / "fit.png")
    assert (tmp_path / "fit.png").stat().st_size > 1000
