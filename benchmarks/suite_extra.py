"""Three more workloads of benchmarks/bench_suite.py (issue 47 item 2), written the way a Keras
user and a PyTorch user would write them; bench_suite.py takes their table, data, models and
twins from here.

* ``lenet5``              LeNet-5 on 32x32x1 images (MNIST padded to 32): Conv2D(6, 5, tanh),
                          AveragePooling2D(2), Conv2D(16, 5, tanh), AveragePooling2D(2),
                          Flatten, Dense(120, tanh), Dense(84, tanh), Dense(10, softmax), Adam,
                          batch 100, 5,000 samples (5x5 convolutions on 1 and 6 channels);
* ``transformer_encoder`` tokens (64 of 2,000) -> Embedding(2,000, 64) -> 2 x post-norm encoder
                          blocks [MultiHeadAttention(4 heads, key_dim 16), Add, LayerNorm,
                          Dense(128, relu), Dense(64), Add, LayerNorm] -> GlobalAveragePooling1D
                          -> Dense(2, softmax), Adam, batch 32, 256 samples (torch:
                          ``nn.TransformerEncoderLayer``, dropout 0, eps 1e-3);
* ``dilated_conv1d``      WaveNet-style stack on a series of length 512: 2 x [Conv1D(32, 2,
                          padding="causal", dilation 1, 2, 4, 8, relu)] -> GlobalAveragePooling1D
                          -> Dense(2, softmax), Adam, batch 32, 256 samples (torch: left padding
                          then ``nn.Conv1d(dilation=d)``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

EXTRA = {
    "lenet5": {"samples": 5000, "batch": 100, "kind": "train", "optimizer": "adam",
               "floor": None},
    "transformer_encoder": {"samples": 256, "batch": 32, "kind": "train", "optimizer": "adam",
                            "floor": None},
    "dilated_conv1d": {"samples": 256, "batch": 32, "kind": "train", "optimizer": "adam",
                       "floor": None},
}
SEQ, VOCAB, EMBED, HEADS, FFN, BLOCKS = 64, 2000, 64, 4, 128, 2
SERIES, FILTERS, DILATIONS = 512, 32, (1, 2, 4, 8) * 2


def make_data(workload: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic (x, y) of ``n`` samples, channels last, integer class labels."""
    rng = np.random.default_rng(seed)
    if workload == "transformer_encoder":
        x = rng.integers(0, VOCAB, size=(n, SEQ)).astype(np.int32)
        return x, rng.integers(0, 2, n).astype(np.int32)
    shape, classes = {"lenet5": ((32, 32, 1), 10), "dilated_conv1d": ((SERIES, 1), 2)}[workload]
    return (rng.random((n, *shape), dtype=np.float32),
            rng.integers(0, classes, n).astype(np.int32))


def kiln_model(workload: str) -> Any:
    """The workload's kiln model (Keras API), not compiled."""
    import kiln

    L = kiln.layers
    if workload == "lenet5":
        return kiln.Sequential([
            kiln.Input((32, 32, 1)), L.Conv2D(6, 5, activation="tanh"), L.AveragePooling2D(2),
            L.Conv2D(16, 5, activation="tanh"), L.AveragePooling2D(2), L.Flatten(),
            L.Dense(120, activation="tanh"), L.Dense(84, activation="tanh"),
            L.Dense(10, activation="softmax")])
    if workload == "transformer_encoder":
        inputs = kiln.Input((SEQ,), dtype="int32")
        x = L.Embedding(VOCAB, EMBED)(inputs)
        for _ in range(BLOCKS):
            a = L.MultiHeadAttention(HEADS, EMBED // HEADS)(x, x)
            x = L.LayerNormalization()(L.Add()([x, a]))
            f = L.Dense(EMBED)(L.Dense(FFN, activation="relu")(x))
            x = L.LayerNormalization()(L.Add()([x, f]))
        outputs = L.Dense(2, activation="softmax")(L.GlobalAveragePooling1D()(x))
        return kiln.Model(inputs, outputs)
    if workload == "dilated_conv1d":
        body = [L.Conv1D(FILTERS, 2, padding="causal", dilation_rate=d, activation="relu")
                for d in DILATIONS]
        return kiln.Sequential([kiln.Input((SERIES, 1)), *body, L.GlobalAveragePooling1D(),
                                L.Dense(2, activation="softmax")])
    raise ValueError(f"suite_extra: unknown workload {workload!r}")


def torch_model(workload: str) -> Any:
    """The PyTorch twin (channels-last input, logits out); ``copy_from_kiln(model)`` on the
    returned module gives it the kiln model's weights."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if workload == "lenet5":
        body = nn.Sequential(nn.Conv2d(1, 6, 5), nn.Tanh(), nn.AvgPool2d(2), nn.Conv2d(6, 16, 5),
                             nn.Tanh(), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(400, 120),
                             nn.Tanh(), nn.Linear(120, 84), nn.Tanh(), nn.Linear(84, 10))
        return _Twin(body, lambda x: x.movedim(-1, 1), _copy_sequential)
    if workload == "transformer_encoder":
        layers = [nn.TransformerEncoderLayer(EMBED, HEADS, FFN, dropout=0.0, batch_first=True,
                                             layer_norm_eps=1e-3) for _ in range(BLOCKS)]
        body = nn.Sequential(nn.Embedding(VOCAB, EMBED), *layers, _Mean(1), nn.Linear(EMBED, 2))
        return _Twin(body, lambda x: x.long(), _copy_encoder)
    if workload == "dilated_conv1d":
        convs: list[nn.Module] = []
        cin = 1
        for d in DILATIONS:
            convs += [nn.ConstantPad1d((d, 0), 0.0), nn.Conv1d(cin, FILTERS, 2, dilation=d),
                      nn.ReLU()]
            cin = FILTERS
        body = nn.Sequential(*convs, _Mean(2), nn.Linear(FILTERS, 2))
        return _Twin(body, lambda x: x.movedim(-1, 1), _copy_sequential)
    raise ValueError(f"suite_extra: unknown workload {workload!r}")


@functools.cache
def _module_classes() -> tuple[type, type]:
    from torch import nn

    class Twin(nn.Module):
        def __init__(self, body: Any, prepare: Any, copy: Any) -> None:
            super().__init__()
            self.body, self.prepare, self.copy = body, prepare, copy

        def forward(self, x: Any) -> Any:
            return self.body(self.prepare(x))

        def copy_from_kiln(self, model: Any) -> None:
            self.copy(model, self.body)

    class Mean(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.dim = dim

        def forward(self, x: Any) -> Any:
            return x.mean(dim=self.dim)

    return Twin, Mean


def _Twin(body: Any, prepare: Any, copy: Any) -> Any:
    return _module_classes()[0](body, prepare, copy)


def _Mean(dim: int) -> Any:
    return _module_classes()[1](dim)


def _set(param: Any, value: np.ndarray) -> None:
    import torch

    with torch.no_grad():
        param.copy_(torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32)))


def _weighted(model: Any) -> list[Any]:
    return [layer for layer in model.layers if layer.weights]


def _copy_sequential(model: Any, body: Any) -> None:
    """Dense / Conv layers in order (kernels to torch's layout; LeNet's Dense after Flatten gets
    its rows reordered from (h, w, c) to torch's (c, h, w))."""
    from torch import nn

    mods = [m for m in body if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d))]
    layers = list(model.layers)
    sources = _weighted(model)
    if len(mods) != len(sources):
        raise ValueError(f"copy_weights: {len(sources)} kiln layers with weights, "
                         f"{len(mods)} torch modules")
    for layer, mod in zip(sources, mods):
        kernel, bias = layer.get_weights()
        if isinstance(mod, nn.Linear):
            i = layers.index(layer)
            if i and type(layers[i - 1]).__name__ == "Flatten":
                h, w, c = layers[i - 1].input.shape[1:]
                kernel = kernel.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(h * w * c, -1)
            kernel = kernel.T
        else:
            nd = kernel.ndim
            kernel = kernel.transpose((nd - 1, nd - 2, *range(nd - 2)))
        _set(mod.weight, kernel)
        _set(mod.bias, bias)


def _copy_encoder(model: Any, body: Any) -> None:
    """Embedding, then per block MultiHeadAttention (q, k, v kernels (E, H, D) -> rows of
    ``in_proj_weight``; output (H, D, E) -> ``out_proj``), LayerNorm, Dense, Dense, LayerNorm,
    then the classifier."""
    src = iter(_weighted(model))
    _set(body[0].weight, next(src).get_weights()[0])
    for block in list(body)[1:1 + BLOCKS]:
        w = next(src).get_weights()
        e = w[0].shape[0]
        _set(block.self_attn.in_proj_weight,
             np.concatenate([w[i].reshape(e, -1).T for i in (0, 2, 4)]))
        _set(block.self_attn.in_proj_bias, np.concatenate([w[i].reshape(-1) for i in (1, 3, 5)]))
        _set(block.self_attn.out_proj.weight, w[6].reshape(-1, e).T)
        _set(block.self_attn.out_proj.bias, w[7])
        for mod in (block.norm1, block.linear1, block.linear2, block.norm2):
            a, b = next(src).get_weights()
            _set(mod.weight, a.T if a.ndim == 2 else a)
            _set(mod.bias, b)
    k, b = next(src).get_weights()
    _set(body[-1].weight, k.T)
    _set(body[-1].bias, b)
