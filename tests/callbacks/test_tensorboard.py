"""TensorBoard: the event-file framing (CRC-32C test vectors), the files fit writes read
back by kiln's reader and, when installed, by TensorBoard's own EventAccumulator."""

from __future__ import annotations

import glob
import os
import struct

import numpy as np
import pytest

import kiln
from kiln import layers
from kiln.callbacks._events import crc32c, frame, masked_crc32c, read_events


@pytest.mark.parametrize("data, want", [
    (b"123456789", 0xE3069283), (b"", 0), (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43), (bytes(range(32)), 0x46DD794E),  # RFC 3720, B.4
])
def test_crc32c_vectors(data, want):
    assert crc32c(data) == want


def test_record_framing():
    rec = frame(b"abc")
    assert struct.unpack("<Q", rec[:8])[0] == 3 and rec[12:15] == b"abc"
    c = 0x364B3FB7  # crc32c(b"abc")
    assert crc32c(b"abc") == c
    assert struct.unpack("<I", rec[15:19])[0] == (((c >> 15) | (c << 17)) + 0xA282EAD8) % 2**32
    assert struct.unpack("<I", rec[8:12])[0] == masked_crc32c(rec[:8])


def _fit(tmp_path, **kwargs):
    kiln.utils.set_random_seed(4)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5], dtype=np.float32))[:, None]
    m = kiln.Sequential([kiln.Input((3,)), layers.Dense(2, name="hidden"),
                         layers.Dense(1, name="out")])
    m.compile("sgd", "mse", metrics=["mae"])
    cb = kiln.callbacks.TensorBoard(tmp_path / "logs", **kwargs)
    history = m.fit(x, y, epochs=3, batch_size=10, validation_split=0.25, callbacks=[cb],
                    verbose=0).history
    return m, history


def _scalars(events, tag):
    return {e["step"]: v["simple_value"] for e in events for v in e.get("values", [])
            if v["tag"] == tag and "simple_value" in v}


def test_fit_writes_train_and_validation_scalars(tmp_path):
    m, history = _fit(tmp_path, update_freq=2, histogram_freq=2)
    train = glob.glob(str(tmp_path / "logs" / "train" / "events.out.tfevents.*.v2"))
    val = glob.glob(str(tmp_path / "logs" / "validation" / "events.out.tfevents.*"))
    assert len(train) == 1 and len(val) == 1
    tev, vev = read_events(train[0]), read_events(val[0])
    assert tev[0]["file_version"] == "brain.Event:2" and vev[0]["file_version"] == "brain.Event:2"
    for tag, key in (("epoch_loss", "loss"), ("epoch_mae", "mae")):
        got = _scalars(tev, tag)
        assert sorted(got) == [0, 1, 2]
        np.testing.assert_array_equal([got[i] for i in range(3)],
                                      np.float32(history[key]))
        got = _scalars(vev, tag)
        np.testing.assert_array_equal([got[i] for i in range(3)],
                                      np.float32(history["val_" + key]))
    assert _scalars(tev, "epoch_learning_rate") == {i: np.float32(0.01) for i in range(3)}
    assert sorted(_scalars(tev, "batch_loss")) == [2, 4, 6, 8]  # 3 batches x 3 epochs
    # histograms at epochs 0 and 2; the last one describes the final weights
    hist = {v["tag"]: (e["step"], v["histo"]) for e in tev for v in e.get("values", [])
            if "histo" in v}
    kernel = m.get_layer("out").weights[0].numpy()
    step, h = hist["out/kernel/histogram"]
    assert step == 2 and h["num"] == kernel.size and sum(h["bucket"]) == kernel.size
    np.testing.assert_allclose(h["sum"], kernel.sum(), rtol=1e-6)
    np.testing.assert_allclose([h["min"], h["max"]], [kernel.min(), kernel.max()], rtol=1e-6)
    assert "hidden/bias/histogram" in hist
    assert sorted(_scalars(vev, "evaluation_loss_vs_iterations")) == [3, 6, 9]


def test_reader_detects_corruption_and_bad_arguments(tmp_path):
    _fit(tmp_path)
    path = glob.glob(str(tmp_path / "logs" / "train" / "events.*"))[0]
    data = bytearray(open(path, "rb").read())
    data[-6] ^= 0xFF
    bad = tmp_path / "bad"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="bad record data CRC at offset"):
        read_events(bad)
    with pytest.raises(ValueError, match="update_freq must be 'epoch', 'batch' or a positive "
                                         "integer, received 0"):
        kiln.callbacks.TensorBoard(tmp_path, update_freq=0)
    assert kiln.callbacks.TensorBoard.chief_only


def test_tensorboard_reads_the_files(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, history = _fit(tmp_path, histogram_freq=1)
    for sub, prefix in (("train", ""), ("validation", "val_")):
        acc = EventAccumulator(os.path.join(tmp_path, "logs", sub))
        acc.Reload()
        loss = acc.Scalars("epoch_loss")
        assert [s.step for s in loss] == [0, 1, 2]
        np.testing.assert_allclose([s.value for s in loss], history[prefix + "loss"],
                                   rtol=1e-6)
    acc = EventAccumulator(os.path.join(tmp_path, "logs", "train"),
                           size_guidance={"histograms": 0})  # keep them all
    acc.Reload()
    hist = acc.Histograms("out/kernel/histogram")
    assert [h.step for h in hist] == [0, 1, 2] and hist[-1].histogram_value.num == 2
