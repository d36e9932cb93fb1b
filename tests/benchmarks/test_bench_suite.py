"""benchmarks/bench_suite.py: the conv-floor counts the GEMMs of an im2col formulation, the floors
count the layers kiln's models have, each kiln model and its PyTorch twin compute the same
function, the table logic; a --quick run end to end (slow: it spawns a dozen processes)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
try:
    import bench_suite as bs
finally:
    sys.path.pop(0)

HAS_TORCH = importlib.util.find_spec("torch") is not None


# ---- conv-floor: im2col shapes --------------------------------------------------------------
def _im2col(x: np.ndarray, k: int, stride: int, padding: str) -> np.ndarray:
    """Independent im2col of a channels-last batch: TensorFlow "same" padding (the odd pixel at
    the end), rows (batch, oh, ow), columns (kh, kw, cin)."""
    n, h, w, c = x.shape
    if padding == "same":
        pads = []
        for size in (h, w):
            out = -(-size // stride)
            total = max((out - 1) * stride + k - size, 0)
            pads.append((total // 2, total - total // 2))
        x = np.pad(x, [(0, 0), *pads, (0, 0)])
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))[:, ::stride, ::stride]
    # win: (n, oh, ow, c, kh, kw) -> rows (n, oh, ow), columns (kh, kw, c)
    return win.transpose(0, 1, 2, 4, 5, 3).reshape(-1, k * k * c)


@pytest.mark.parametrize("size,k,stride,padding", [
    ((9, 8), 3, 2, "same"), ((9, 8), 3, 1, "valid"), ((7, 7), 5, 2, "valid"), ((6, 5), 1, 1,
                                                                                 "same")])
def test_conv_floor_gemm_shapes_are_the_im2col_shapes(size, k, stride, padding):
    batch, cin, cout = 2, 3, 5
    x = np.random.default_rng(0).random((batch, *size, cin))
    cols = _im2col(x, k, stride, padding)
    (g,) = bs.gemms_of((*size, cin), [("conv", cout, k, stride, padding)], batch)
    oh, ow = ((-(-d // stride)) if padding == "same" else (d - k) // stride + 1 for d in size)
    assert cols.shape == (batch * oh * ow, k * k * cin)
    assert (g.m, g.k, g.n) == (*cols.shape, cout)
    assert not g.input_grad and not g.transposed  # the first layer: no input gradient


def test_conv_floor_transposed_convolution_is_the_convolution_back():
    # Conv2DTranspose(4, 3, strides 2, same) on 5x5x6 is the input gradient of the convolution
    # (stride 2, same) from its 10x10x4 output to its input: that convolution's im2col shapes
    batch = 3
    out = np.zeros((batch, 10, 10, 4))
    cols = _im2col(out, 3, 2, "same")
    gs = bs.gemms_of((5, 5, 6), [("conv", 6, 1, 1, "same"), ("convT", 4, 3, 2)], batch)
    assert gs[1].transposed and gs[1].input_grad
    assert (gs[1].m, gs[1].k, gs[1].n) == (*cols.shape, 6)


def test_conv_floor_step_runs_the_three_gemms_per_layer():
    step, info = bs.floor_case("conv_autoencoder")
    gs = bs.floor_gemms("conv_autoencoder", bs.WORKLOADS["conv_autoencoder"]["batch"])
    expected = []
    for g in gs:  # forward (transposed: the (M, N) @ (N, K) one)
        expected.append(((g.m, g.n), (g.n, g.k)) if g.transposed else ((g.m, g.k), (g.k, g.n)))
    for g in gs[::-1]:  # backward: kernel gradient, then input gradient but for the first layer
        expected.append(((g.k, g.m), (g.m, g.n)))
        if g.input_grad:
            expected.append(((g.m, g.k), (g.k, g.n)) if g.transposed else ((g.m, g.n), (g.n, g.k)))
    assert info["gemms"] == expected and len(expected) == 3 * len(gs) - 1
    step(None, None)


@pytest.mark.parametrize("workload", [w for w in bs.FLOOR_LAYERS])
def test_floor_layers_are_the_kiln_models_layers(workload):
    """The floors' layer tables against the benchmarked kiln models (shapes read off kiln's
    layers: M = batch x output pixels, K = kernel taps x input channels, N = output channels;
    for a Conv2DTranspose the input pixels and the kernel's (kh, kw, filters) x channels)."""
    batch = 4
    model = bs.kiln_model(workload)
    expected = []
    for layer in model.layers:
        kind = type(layer).__name__
        if kind not in ("Dense", "Conv1D", "Conv2D", "Conv2DTranspose"):
            continue
        kernel = layer.kernel.shape
        pixels = (layer.input if kind == "Conv2DTranspose" else layer.output).shape[1:-1]
        expected.append((batch * math.prod(pixels), math.prod(kernel[:-1]), kernel[-1],
                         bool(expected), kind == "Conv2DTranspose"))
    assert [tuple(g) for g in bs.floor_gemms(workload, batch)] == expected


def test_floor_of_a_workload_without_one_is_an_error():
    with pytest.raises(ValueError, match="no floor is defined for text_classifier"):
        bs.floor_case("text_classifier")


# ---- kiln and its torch twin compute the same function ---------------------------------------
def _randomize(model) -> None:
    """Kiln's initial kernels, but non-zero biases, BatchNormalization statistics away from
    (0, 1) and unit-variance embeddings, so a mismatch in any of them shows."""
    rng = np.random.default_rng(3)
    for layer in model.layers:
        ws = layer.get_weights()
        if not ws:
            continue
        kind = type(layer).__name__
        new = []
        for i, a in enumerate(ws):
            if kind == "Embedding":
                a = rng.standard_normal(a.shape)
            elif kind == "BatchNormalization" and i == 3:
                a = rng.uniform(0.5, 1.5, a.shape)
            elif a.ndim == 1:
                a = a + 0.2 * rng.standard_normal(a.shape)
            new.append(a.astype(np.float32))
        layer.set_weights(new)


FAST_TWINS = ("wide_mlp", "conv_autoencoder")


@pytest.mark.torch
@pytest.mark.parametrize("workload", [
    w if w in FAST_TWINS else pytest.param(w, marks=pytest.mark.slow) for w in bs.SUITE])
def test_kiln_model_and_torch_twin_compute_the_same(workload):
    torch = pytest.importorskip("torch")
    model = bs.kiln_model(workload)
    _randomize(model)
    twin = bs.torch_model(workload).eval()
    bs.copy_weights(model, twin)
    x, _ = bs.make_data(workload)
    x = x[:3]
    got = model.predict(x, verbose=0)
    with torch.no_grad():
        want = twin(torch.from_numpy(x).long() if x.dtype == np.int32 else torch.from_numpy(x))
        if workload not in ("text_classifier", "conv_autoencoder"):  # twin: logits
            want = torch.softmax(want, -1)
    want = want.numpy()
    assert got.shape == want.shape
    assert np.std(want) > 1e-3  # not a constant output that any weights would give
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.torch
def test_copy_weights_rejects_a_different_model():
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match="3 kiln layers with weights, 2 torch modules"):
        bs.copy_weights(bs.kiln_model("wide_mlp"), bs.torch_model("text_classifier"))


# ---- coordinator logic (no processes) --------------------------------------------------------
def test_frameworks_per_workload():
    everything = ["kiln", "torch", "torch_fused", "floor"]
    assert bs.frameworks_for("conv_autoencoder", everything) == [
        "kiln", "torch", "torch_fused", "conv"]
    assert bs.frameworks_for("mlp_train", everything) == ["kiln", "torch", "gemm"]  # SGD
    assert bs.frameworks_for("tiny_train", everything) == ["kiln", "torch"]
    assert bs.frameworks_for("text_classifier", ["kiln", "floor"]) == ["kiln"]


def test_suite_ratios_are_medians_over_pairs():
    results = [{"framework": f, "workload": "mlp_train"} for f in ("kiln", "torch", "gemm")]
    pairs = [{"kiln": 1.0, "torch": 2.0, "gemm": 0.5}, {"kiln": 2.0, "torch": 2.0, "gemm": 1.0},
             {"kiln": 1.0, "torch": 3.0, "gemm": 0.8}]
    bs.add_suite_ratios(results, pairs)
    kiln = results[0]
    assert (kiln["vs_torch_median"], kiln["vs_torch_min"], kiln["vs_torch_max"]) == (2.0, 1.0,
                                                                                     3.0)
    assert (kiln["vs_floor_median"], kiln["vs_floor_max"], kiln["floor"]) == (2.0, 2.0, "gemm")
    assert "vs_torch_fused_median" not in kiln
    assert bs.status(kiln) == ">1.15x floor"
    assert bs.status({"workload": "cifar_cnn", "vs_torch_median": 1.1}) == "<1.2x torch"
    assert bs.status({"workload": "cifar_cnn", "vs_torch_median": 0.9}) == "<1.0x torch"
    assert bs.status({"workload": "mlp_predict", "vs_torch_median": 1.3,
                      "vs_floor_median": 1.04}) == "ok"
    assert bs.status({"workload": "cifar_cnn"}) == ""  # --frameworks kiln floor: no torch
    # predict's PyTorch bar is 1.0x (its floor is only ~1.2x ahead of PyTorch), train's 1.2x
    assert bs.status({"workload": "mlp_predict", "vs_torch_median": 1.1,
                      "vs_floor_median": 1.04}) == "ok"
    assert bs.status({"workload": "mlp_predict", "vs_torch_median": 0.98,
                      "vs_floor_median": 1.04}) == "<1.0x torch"
    assert bs.status({"workload": "mlp_train", "vs_torch_median": 1.1,
                      "vs_floor_median": 1.1}) == "<1.2x torch"


def test_table_has_one_row_per_workload(capsys):
    rows = [{"framework": "kiln", "workload": "cifar_cnn", "samples_per_s_median": 100.0,
             "vs_torch_median": 0.94, "vs_torch_min": 0.9, "vs_torch_max": 1.0,
             "vs_floor_median": 1.8, "floor": "conv"},
            {"framework": "torch", "workload": "cifar_cnn", "samples_per_s_median": 106.4},
            {"framework": "conv", "workload": "cifar_cnn", "error": "boom"}]
    bs.print_table(rows)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("cifar_cnn"))
    assert line.split()[:4] == ["cifar_cnn", "100", "106", "0.94x"]
    assert "conv-floor" in line and "1.80x" in line and "<1.0x torch" in line
    assert "conv-floor error: boom" in out


# ---- end to end -------------------------------------------------------------------------------
@pytest.mark.slow  # spawns a worker per framework and workload (about a minute on 2 cores)
def test_quick_run_end_to_end(tmp_path):
    workloads = ["text_classifier", "conv_autoencoder", "mlp_predict"]
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "bench_suite.py"), "--quick",
           "--epochs", "1", "--settle", "0", "--workloads", *workloads,
           "--chart", str(tmp_path / "suite.png")]
    if not HAS_TORCH:
        cmd += ["--frameworks", "kiln", "floor"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    results = [json.loads(line[5:]) for line in proc.stdout.splitlines()
               if line.startswith("JSON ")]
    expected = {("kiln", w) for w in workloads} | {("conv", "conv_autoencoder"),
                                                   ("gemm", "mlp_predict")}
    if HAS_TORCH:
        expected |= {("torch", w) for w in workloads} | {
            ("torch_fused", "text_classifier"), ("torch_fused", "conv_autoencoder")}
    assert {(r["framework"], r["workload"]) for r in results} == expected
    for r in results:
        assert "error" not in r, r
        assert r["samples"] == 2 * r["batch"] and r["samples_per_s"] > 0
    kiln = {r["workload"]: r for r in results if r["framework"] == "kiln"}
    assert kiln["conv_autoencoder"]["floor"] == "conv" and kiln["mlp_predict"]["floor"] == "gemm"
    assert kiln["conv_autoencoder"]["vs_floor_median"] > 0
    if HAS_TORCH:
        assert kiln["text_classifier"]["vs_torch_fused_pairs"] == 1
        assert "vs_torch_fused_median" not in kiln["mlp_predict"]
    table = proc.stdout.split("JSON ")[0]
    assert all(any(line.startswith(w) for line in table.splitlines()) for w in workloads)
    if importlib.util.find_spec("matplotlib") is not None and HAS_TORCH:
        assert (tmp_path / "suite.png").stat().st_size > 0
