"""Your own layer and your own model: subclass ``kiln.layers.Layer`` and ``kiln.Model``,
register them, train, save the model to a ``.keras`` file and load it back.

* ``GatedResidual`` is a layer with weights: ``y = x + gate * relu(x @ W + b)``, where the
  per-unit ``gate`` starts at zero, so each block starts as the identity and learns how much
  to add. It follows the Layer contract: ``__init__`` stores the config, ``build`` creates
  the weights with ``add_weight``, ``call`` is pure ``kiln.ops``, ``get_config`` returns the
  constructor arguments.
* ``ResidualMLP`` is a subclassed Model: layers assigned in ``__init__``, the forward pass in
  ``call(inputs, training=None)``, and ``get_config`` for saving.
* ``@kiln.saving.register_serializable`` makes both loadable by name, so
  ``kiln.models.load_model`` needs no ``custom_objects``.

Runs on the MNIST sample shipped with kiln.

    python examples/custom_layer.py [--quick] [--epochs N] [--save-to model.keras]
"""

import argparse
import os
import tempfile

import numpy as np

import kiln
import kiln.ops as K
from kiln import layers
from kiln.datasets import mnist
from kiln.saving import register_serializable


@register_serializable(package="examples")
class GatedResidual(layers.Layer):
    """``y = x + gate * activation(x @ kernel + bias)``; keeps the input's width.

    Args:
        activation: the activation of the residual branch (default ``"relu"``).
        kernel_initializer: initializer of the kernel (default ``"he_normal"``).
    """

    def __init__(self, activation="relu", kernel_initializer="he_normal", **kwargs):
        super().__init__(**kwargs)
        self.activation = kiln.activations.get(activation)
        self.kernel_initializer = kernel_initializer

    def build(self, input_shape):
        units = input_shape[-1]
        self.kernel = self.add_weight("kernel", (units, units),
                                      initializer=self.kernel_initializer)
        self.bias = self.add_weight("bias", (units,), initializer="zeros")
        self.gate = self.add_weight("gate", (units,), initializer="zeros")

    def call(self, x):
        return x + self.gate * self.activation(K.matmul(x, self.kernel) + self.bias)

    def get_config(self):
        return {**super().get_config(),
                "activation": kiln.activations.serialize(self.activation),
                "kernel_initializer": self.kernel_initializer}


@register_serializable(package="examples")
class ResidualMLP(kiln.Model):
    """Flatten, project to ``width`` units, ``depth`` GatedResidual blocks, softmax."""

    def __init__(self, width=128, depth=2, num_classes=10, dropout=0.2, **kwargs):
        super().__init__(**kwargs)
        self.width, self.depth = width, depth
        self.num_classes, self.dropout_rate = num_classes, dropout
        self.flatten = layers.Flatten()
        self.project = layers.Dense(width, activation="relu")
        self.blocks = [GatedResidual() for _ in range(depth)]
        self.dropout = layers.Dropout(dropout)
        self.classifier = layers.Dense(num_classes, activation="softmax")

    def call(self, inputs, training=None):
        x = self.project(self.flatten(inputs))
        for block in self.blocks:
            x = block(x)
        return self.classifier(self.dropout(x, training=training))

    def get_config(self):
        return {**super().get_config(), "width": self.width, "depth": self.depth,
                "num_classes": self.num_classes, "dropout": self.dropout_rate}


def main(quick: bool = False, epochs: int | None = None, save_to: str | None = None,
         seed: int = 1337) -> float:
    kiln.utils.set_random_seed(seed)
    (x_train, y_train), (x_test, y_test) = mnist.load_sample()
    print("Training on the MNIST sample shipped with kiln (10,000 training / 2,000 test "
          "digits).")
    x_train, x_test = x_train.astype("float32") / 255, x_test.astype("float32") / 255

    model = ResidualMLP(width=128, depth=2, name="residual_mlp")
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(x_train, y_train, batch_size=128, epochs=epochs or (1 if quick else 6),
              validation_split=0.1, verbose=1)   # builds the model on the first batch
    model.summary()
    gates = [float(np.abs(block.gate.numpy()).mean()) for block in model.blocks]
    print("mean |gate| of each residual block after training: "
          + ", ".join(f"{g:.3f}" for g in gates))
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=500, verbose=0)
    print(f"Test accuracy: {accuracy:.4f}")

    with tempfile.TemporaryDirectory() as tmp:
        path = save_to or os.path.join(tmp, "residual_mlp.keras")
        model.save(path)
        print(f"Saved to {path} ({os.path.getsize(path):,} bytes)")
        # No custom_objects needed: both classes are registered.
        restored = kiln.models.load_model(path)

    print(f"Reloaded: {type(restored).__name__} with {len(restored.blocks)} "
          f"{type(restored.blocks[0]).__name__} blocks, compiled={restored.compiled}")
    before = model.predict(x_test, batch_size=500, verbose=0)
    after = restored.predict(x_test, batch_size=500, verbose=0)
    print(f"Largest difference between the predictions before and after reloading: "
          f"{float(np.max(np.abs(before - after))):.3g}")
    _, reloaded_accuracy = restored.evaluate(x_test, y_test, batch_size=500, verbose=0)
    print(f"Test accuracy of the reloaded model: {reloaded_accuracy:.4f}")
    if not np.allclose(before, after, atol=1e-6):
        raise SystemExit("the reloaded model predicts differently")
    return accuracy


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one epoch (CI)")
    parser.add_argument("--epochs", type=int, default=None, help="default 6 (--quick: 1)")
    parser.add_argument("--save-to", default=None,
                        help="where to save the model (default: a temporary folder)")
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()
    main(args.quick, args.epochs, args.save_to, args.seed)
