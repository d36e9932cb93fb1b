"""The graph core on its own, the way Theano and TensorFlow 1 were used: placeholders,
Variables, kiln.grad, and a compiled function with in-place updates.

Trains logistic regression on the embedded MNIST sample (digit 0 vs the rest).

    python examples/graph_core.py [--quick]
"""

import argparse

import numpy as np

import kiln
import kiln.ops as K
from kiln.datasets import mnist


def main(quick: bool = False) -> None:
    (x_train, y_train), (x_test, y_test) = mnist.load_sample()
    x_train = x_train.reshape(-1, 784).astype("float32") / 255
    x_test = x_test.reshape(-1, 784).astype("float32") / 255
    y_train, y_test = (y_train == 0).astype("float32"), (y_test == 0).astype("float32")

    x = kiln.placeholder((None, 784), name="x")
    y = kiln.placeholder((None,), name="y")
    w = kiln.Variable(np.zeros((784, 1)), name="w")
    b = kiln.Variable(np.zeros(1), name="b")
    logits = K.reshape(x @ w + b, (-1,))
    # stable binary cross-entropy on logits: softplus(z) - y*z
    loss = K.mean(K.softplus(logits) - y * logits)
    gw, gb = kiln.grad(loss, [w, b])
    train = kiln.function([x, y], loss, updates=[(w, w - 0.5 * gw), (b, b - 0.5 * gb)])
    accuracy = kiln.function([x, y], K.mean(K.cast(K.equal(K.cast(logits > 0, "float32"), y),
                                                   "float32")))
    epochs = 1 if quick else 5
    for epoch in range(epochs):
        losses = [train(x_train[i:i + 128], y_train[i:i + 128])
                  for i in range(0, len(x_train), 128)]
        print(f"epoch {epoch + 1}: loss {np.mean(losses):.4f}, "
              f"test accuracy {float(accuracy(x_test, y_test)):.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="one epoch (CI)")
    main(parser.parse_args().quick)
