"""Endpoint layer pattern.

Source: https://keras.io/examples/keras_recipes/endpoint_layer_pattern/
(keras-team/keras-io, examples/keras_recipes/endpoint_layer_pattern.py, the tf.keras version at
commit 2dd71c68).

Adaptations:
- imports: ``from tensorflow import keras`` -> ``import kiln as keras`` (``import tensorflow as
  tf`` kept, as the original uses ``tf.nn.softmax`` inside ``call``);
- data: 256 rows instead of 1000 (same columns and dtypes);
- epochs: 1 instead of 2.
"""

# ruff: noqa: I001, UP008, UP031, UP032, F811, E712  (kept as in the original text)

import tensorflow as tf
import kiln as keras
import numpy as np


class LogisticEndpoint(keras.layers.Layer):
    def __init__(self, name=None):
        super(LogisticEndpoint, self).__init__(name=name)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
        self.accuracy_fn = keras.metrics.BinaryAccuracy(name="accuracy")

    def call(self, logits, targets=None, sample_weight=None):
        if targets is not None:
            # Compute the training-time loss value and add it
            # to the layer using `self.add_loss()`.
            loss = self.loss_fn(targets, logits, sample_weight)
            self.add_loss(loss)

            # Log the accuracy as a metric (we could log arbitrary metrics,
            # including different metrics for training and inference.
            self.add_metric(self.accuracy_fn(targets, logits, sample_weight))

        # Return the inference-time prediction tensor (for `.predict()`).
        return tf.nn.softmax(logits)


inputs = keras.Input((764,), name="inputs")
logits = keras.layers.Dense(1)(inputs)
targets = keras.Input((1,), name="targets")
sample_weight = keras.Input((1,), name="sample_weight")
preds = LogisticEndpoint()(logits, targets, sample_weight)
model = keras.Model([inputs, targets, sample_weight], preds)

data = {
    "inputs": np.random.random((256, 764)),
    "targets": np.random.random((256, 1)),
    "sample_weight": np.random.random((256, 1)),
}

model.compile(keras.optimizers.Adam(1e-3))
model.fit(data, epochs=1)

inputs = keras.Input((764,), name="inputs")
logits = keras.layers.Dense(1)(inputs)
preds = LogisticEndpoint()(logits, targets=None, sample_weight=None)
inference_model = keras.Model(inputs, preds)

inference_model.set_weights(model.get_weights())

preds = inference_model.predict(np.random.random((256, 764)))


class LogReg(keras.Model):
    def __init__(self):
        super(LogReg, self).__init__()
        self.dense = keras.layers.Dense(1)
        self.logistic_endpoint = LogisticEndpoint()

    def call(self, inputs):
        # Note that all inputs should be in the first argument
        # since we want to be able to call `model.fit(inputs)`.
        logits = self.dense(inputs["inputs"])
        preds = self.logistic_endpoint(
            logits=logits,
            targets=inputs["targets"],
            sample_weight=inputs["sample_weight"],
        )
        return preds


model = LogReg()
data = {
    "inputs": np.random.random((256, 764)),
    "targets": np.random.random((256, 1)),
    "sample_weight": np.random.random((256, 1)),
}

model.compile(keras.optimizers.Adam(1e-3))
model.fit(data, epochs=1)
