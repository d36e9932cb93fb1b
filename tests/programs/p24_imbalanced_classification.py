"""Imbalanced classification: credit card fraud detection.

Source: https://keras.io/examples/structured_data/imbalanced_classification/
(keras-team/keras-io, examples/structured_data/imbalanced_classification.py, Keras 3 version at
commit 0e2570ad).

Adaptations:
- imports: ``import keras`` -> ``import kiln as keras``;
- data: a synthetic ``creditcard.csv`` written first (same layout as Kaggle's file: a quoted
  header, 30 float columns, a quoted 0/1 "Class" column; 5,000 rows, about 2% positives whose
  features are shifted) instead of the downloaded file; ``fname`` points at it;
- epochs: 2 instead of 30; batch size 512 instead of 2048; a final ``print`` of the last
  validation recall.
- ``history = model.fit(...)`` keeps the result for that final ``print``.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712, E402, F401  (kept as in the original text)

import csv
import numpy as np

# (adapted: write a synthetic file of the Kaggle layout instead of downloading it)
_rng = np.random.default_rng(0)
with open("creditcard.csv", "w") as _f:
    _cols = ["Time"] + ["V%d" % _i for _i in range(1, 29)] + ["Amount", "Class"]
    _f.write(",".join('"%s"' % _c for _c in _cols) + "\n")
    for _i in range(5000):
        _cls = int(_rng.random() < 0.02)
        _vals = _rng.normal(size=30) + 2.0 * _cls
        _f.write(",".join("%.6f" % _v for _v in _vals) + ',"%d"\n' % _cls)

# Get the real data from https://www.kaggle.com/mlg-ulb/creditcardfraud/
fname = "creditcard.csv"

all_features = []
all_targets = []
with open(fname) as f:
    for i, line in enumerate(f):
        if i == 0:
            print("HEADER:", line.strip())
            continue  # Skip header
        fields = line.strip().split(",")
        all_features.append([float(v.replace('"', "")) for v in fields[:-1]])
        all_targets.append([int(fields[-1].replace('"', ""))])
        if i == 1:
            print("EXAMPLE FEATURES:", all_features[-1])

features = np.array(all_features, dtype="float32")
targets = np.array(all_targets, dtype="uint8")
print("features.shape:", features.shape)
print("targets.shape:", targets.shape)

num_val_samples = int(len(features) * 0.2)
train_features = features[:-num_val_samples]
train_targets = targets[:-num_val_samples]
val_features = features[-num_val_samples:]
val_targets = targets[-num_val_samples:]

print("Number of training samples:", len(train_features))
print("Number of validation samples:", len(val_features))

counts = np.bincount(train_targets[:, 0])
print(
    "Number of positive samples in training data: {} ({:.2f}% of total)".format(
        counts[1], 100 * float(counts[1]) / len(train_targets)
    )
)

weight_for_0 = 1.0 / counts[0]
weight_for_1 = 1.0 / counts[1]

mean = np.mean(train_features, axis=0)
train_features -= mean
val_features -= mean
std = np.std(train_features, axis=0)
train_features /= std
val_features /= std

import kiln as keras

model = keras.Sequential(
    [
        keras.Input(shape=train_features.shape[1:]),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(1, activation="sigmoid"),
    ]
)
model.summary()

metrics = [
    keras.metrics.FalseNegatives(name="fn"),
    keras.metrics.FalsePositives(name="fp"),
    keras.metrics.TrueNegatives(name="tn"),
    keras.metrics.TruePositives(name="tp"),
    keras.metrics.Precision(name="precision"),
    keras.metrics.Recall(name="recall"),
]

model.compile(
    optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy", metrics=metrics
)

callbacks = [keras.callbacks.ModelCheckpoint("fraud_model_at_epoch_{epoch}.keras")]
class_weight = {0: weight_for_0, 1: weight_for_1}

history = model.fit(
    train_features,
    train_targets,
    batch_size=512,
    epochs=2,
    verbose=2,
    callbacks=callbacks,
    validation_data=(val_features, val_targets),
    class_weight=class_weight,
)
print("val recall:", history.history["val_recall"][-1])  # (adapted: printed for the test)
