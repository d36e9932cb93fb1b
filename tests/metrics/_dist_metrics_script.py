"""Run by tests/metrics/test_metrics_distributed.py, alone or under ``mpiexec -n 2``: evaluates
a fixed model with the Keras 3 metrics (and a Keras-style metric with variables) and writes
the logs of rank 0 (or every rank) to OUT (``.npz``)."""

import argparse

import numpy as np

import kiln
import kiln.ops as K

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--distributed", action="store_true")
args = p.parse_args()
kiln.config.set_floatx("float64")
if args.distributed:
    kiln.distribution.set_distribution(kiln.distribution.DataParallel(timeout=60))
rank = kiln.distribution.rank()


class WeightedMAE(kiln.metrics.Metric):
    def __init__(self, name="wmae", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), name="total")
        self.count = self.add_variable(shape=(), name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        values = K.mean(K.abs(y_true - y_pred), axis=-1)
        w = K.ones_like(values) if sample_weight is None else K.reshape(sample_weight, (-1,))
        self.total.assign_add(K.sum(values * w))
        self.count.assign_add(K.sum(w))

    def result(self):
        return self.total / self.count


rng = np.random.default_rng(0)
x = rng.standard_normal((53, 6))
y = (rng.uniform(size=(53, 3)) < 0.4).astype("float64")
sw = rng.uniform(0.2, 1.5, 53)
model = kiln.Sequential([kiln.Input((6,)), kiln.layers.Dense(3, activation="sigmoid")])
model.set_weights([rng.standard_normal((6, 3)), rng.standard_normal(3) * 0.1])
M = kiln.metrics
model.compile("sgd", "binary_crossentropy",
              weighted_metrics=[M.F1Score(average="weighted", threshold=0.5), M.R2Score(),
                                M.OneHotMeanIoU(3), M.PrecisionAtRecall(0.5),
                                M.FBetaScore(average="micro", beta=2.0), WeightedMAE()])
logs = model.evaluate(x, y, sample_weight=sw, batch_size=10, verbose=0, return_dict=True)
np.savez(f"{args.out}.rank{rank}.npz", **{k: np.asarray(v) for k, v in logs.items()})
