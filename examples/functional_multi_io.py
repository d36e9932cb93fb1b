"""The functional API with two inputs and two outputs, a shared encoder and loss weights.

The model looks at two MNIST digits, ``left`` and ``right``. One shared encoder (the same
layers, the same weights) embeds both. Two heads answer two questions:

* ``digit``: which digit is on the left? (10-way softmax, sparse categorical cross-entropy)
* ``same``: do both images show the same digit? (sigmoid, binary cross-entropy)

``compile`` takes one loss per output and ``loss_weights`` that say how much each counts in
the total loss that is minimized (here ``1.0 * digit_loss + 0.5 * same_loss``). Inputs,
targets, losses and metrics are dicts keyed by the names of the Input layers and of the
output layers. Runs on the MNIST sample shipped with kiln.

    python examples/functional_multi_io.py [--quick] [--epochs N] [--plot DIR]
"""

import argparse
import os

import numpy as np

import kiln
from kiln import layers
from kiln.datasets import mnist


def make_pairs(x: np.ndarray, y: np.ndarray, rng: np.random.Generator):
    """Pairs every image with a partner: half of the partners show the same digit."""
    by_digit = [np.flatnonzero(y == d) for d in range(10)]
    partner = rng.integers(0, len(x), size=len(x))
    same = rng.random(len(x)) < 0.5
    for i in np.flatnonzero(same):
        partner[i] = rng.choice(by_digit[y[i]])
    inputs = {"left": x, "right": x[partner]}
    targets = {"digit": y, "same": (y == y[partner]).astype("float32")}
    return inputs, targets


def build_model() -> kiln.Model:
    left = kiln.Input(shape=(28, 28), name="left")
    right = kiln.Input(shape=(28, 28), name="right")

    # One encoder, called on both inputs: its layers (and weights) are shared.
    flatten = layers.Flatten(name="flatten")
    hidden = layers.Dense(256, activation="relu", name="encoder_hidden")
    embed = layers.Dense(64, activation="relu", name="embedding")
    left_code = embed(hidden(flatten(left)))
    right_code = embed(hidden(flatten(right)))

    digit = layers.Dense(10, activation="softmax", name="digit")(
        layers.Dropout(0.2, name="digit_dropout")(left_code))
    both = layers.Concatenate(name="pair")(
        [left_code, right_code, layers.Multiply(name="agreement")([left_code, right_code])])
    same = layers.Dense(1, activation="sigmoid", name="same")(
        layers.Dense(64, activation="relu", name="compare")(both))
    return kiln.Model(inputs={"left": left, "right": right},
                      outputs={"digit": digit, "same": same}, name="two_digits")


def main(quick: bool = False, epochs: int | None = None, plot_dir: str | None = None,
         seed: int = 1337) -> dict:
    kiln.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    (x_train, y_train), (x_test, y_test) = mnist.load_sample()
    print("Training on the MNIST sample shipped with kiln (10,000 training / 2,000 test "
          "digits), in pairs.")
    x_train, x_test = x_train.astype("float32") / 255, x_test.astype("float32") / 255
    if quick:  # CI: half of the sample, one epoch
        x_train, y_train = x_train[:5000], y_train[:5000]
    train_inputs, train_targets = make_pairs(x_train, y_train, rng)
    test_inputs, test_targets = make_pairs(x_test, y_test, rng)

    model = build_model()
    model.summary()
    model.compile(
        optimizer="adam",
        loss={"digit": "sparse_categorical_crossentropy", "same": "binary_crossentropy"},
        loss_weights={"digit": 1.0, "same": 0.5},
        metrics={"digit": ["accuracy"], "same": ["accuracy"]},
    )
    model.fit(train_inputs, train_targets, batch_size=64, epochs=epochs or (1 if quick else 8),
              validation_split=0.1, verbose=1)

    results = model.evaluate(test_inputs, test_targets, batch_size=500, verbose=0,
                             return_dict=True)
    print("Test results: " + ", ".join(f"{k} {v:.4f}" for k, v in results.items()))
    print(f"Test accuracy (which digit is on the left): {results['digit_accuracy']:.4f}")
    print(f"Test accuracy (same digit on both sides): {results['same_accuracy']:.4f}")

    predictions = model.predict({k: v[:4] for k, v in test_inputs.items()}, verbose=0)
    for i in range(4):
        print(f"  pair {i}: left is a {int(np.argmax(predictions['digit'][i]))} "
              f"(true {test_targets['digit'][i]}); same digit with probability "
              f"{float(predictions['same'][i, 0]):.2f} (true {bool(test_targets['same'][i])})")

    if plot_dir:
        from kiln.utils.plot import plot_model

        os.makedirs(plot_dir, exist_ok=True)
        try:
            print("Wrote the model graph to "
                  f"{plot_model(model, os.path.join(plot_dir, 'two_digits.png'))}")
        except RuntimeError as exc:  # Graphviz missing: the .dot file is still written
            print(exc)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one epoch on half of the sample (CI)")
    parser.add_argument("--epochs", type=int, default=None, help="default 8 (--quick: 1)")
    parser.add_argument("--plot", metavar="DIR", default=None,
                        help="write the model graph (Graphviz) into DIR")
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()
    main(args.quick, args.epochs, args.plot, args.seed)
