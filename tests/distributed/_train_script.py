"""Run by tests/distributed/test_data_parallel.py, alone or under ``mpiexec -n 2``.

Trains a small model with a fixed seed and data and writes the final weights, the loss
history and the predictions (rank 0) or each rank's weights to OUT (``.npz``).
"""

import argparse
import os
import sys

import numpy as np

import kiln

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--model", default="mlp")
p.add_argument("--distributed", action="store_true")
p.add_argument("--batch", type=int, default=32)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--n", type=int, default=250)  # not a multiple of the batch: a partial batch
p.add_argument("--fail-rank", type=int, default=-1)
p.add_argument("--fail-how", default="raise")
p.add_argument("--mismatch", action="store_true")
p.add_argument("--float64", action="store_true")
p.add_argument("--generator", action="store_true")  # batches from a generator, not arrays
p.add_argument("--backup", default=None)  # a BackupAndRestore folder (save_freq=4 steps)
p.add_argument("--kill-at-step", type=int, default=-1)  # every rank SIGKILLs itself there
p.add_argument("--differ", default=None)  # rank 1's model or compile differs: what
p.add_argument("--dropout", type=float, default=0.0)  # a Dropout layer in the MLP
p.add_argument("--rank-seeds", action="store_true")  # each rank sets its own random seed
p.add_argument("--catch", action="store_true")  # the failing rank catches fit's error
p.add_argument("--bucket-bytes", type=int, default=None)  # DataParallel(bucket_bytes=...)
args = p.parse_args()
if args.float64:  # round-off out of the way: the distributed sums match to ~1e-14
    kiln.config.set_floatx("float64")

if args.distributed:
    kiln.distribution.set_distribution(kiln.distribution.DataParallel(
        timeout=60, bucket_bytes=args.bucket_bytes))
rank = kiln.distribution.rank()

kiln.utils.set_random_seed(1234 + (1000 * rank if args.rank_seeds else 0))
differ = args.differ if rank == 1 else None
rng = np.random.default_rng(0)
if args.model == "mlp":
    x = rng.standard_normal((args.n, 12)).astype("float32")
    y = (x[:, :3].sum(1) > 0).astype("int32") + (x[:, 3] > 1).astype("int32")
    width = 16 if not (args.mismatch and rank == 1) else 17
    rate = args.dropout + (0.1 if differ == "dropout" else 0.0)
    model = kiln.Sequential([kiln.layers.Input((12,)),
                             kiln.layers.Dense(width, activation="tanh" if differ == "activation"
                                               else "relu"),
                             *([kiln.layers.Dropout(rate)] if rate else []),
                             kiln.layers.Dense(3, activation="softmax")])
else:  # a small convnet; "bn"/"syncbn": with BatchNormalization (per-replica / synchronized)
    x = rng.standard_normal((args.n, 10, 10, 1)).astype("float32")
    y = (x[:, :5].mean((1, 2, 3)) > 0).astype("int32")
    bn = [kiln.layers.BatchNormalization(synchronized=args.model == "syncbn")] \
        if args.model in ("bn", "syncbn") else []
    model = kiln.Sequential([kiln.layers.Input((10, 10, 1)),
                             kiln.layers.Conv2D(4, 3, activation="relu"), *bn,
                             kiln.layers.MaxPooling2D(2),
                             kiln.layers.Flatten(),
                             kiln.layers.Dense(2, activation="softmax")])
model.compile(optimizer=kiln.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"] + (["sparse_top_k_categorical_accuracy"]
                                      if differ == "metric" else []))


class Fail(kiln.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if rank == args.fail_rank and batch == 3:
            if args.fail_how == "kill":
                os.kill(os.getpid(), 9)
            if args.fail_how == "exit":
                sys.exit(0)
            if args.fail_how == "os_exit":
                os._exit(0)
            raise RuntimeError("rank failed on purpose")


if args.generator:  # every rank's generator yields the same global batches
    steps = -(-len(x) // args.batch)

    def batches():
        while True:
            for i in range(steps):
                yield x[i * args.batch:(i + 1) * args.batch], y[i * args.batch:(i + 1) * args.batch]

    fit_data = {"x": batches(), "steps_per_epoch": steps}
else:
    fit_data = {"x": x, "y": y, "batch_size": args.batch}
class KillAll(kiln.callbacks.Callback):
    steps = 0

    def on_train_batch_end(self, batch, logs=None):
        KillAll.steps += 1
        if KillAll.steps == args.kill_at_step:
            os.kill(os.getpid(), 9)


callbacks = [Fail(), KillAll()]
if args.backup:
    callbacks.insert(0, kiln.callbacks.BackupAndRestore(args.backup, save_freq=4))
try:
    hist = model.fit(**fit_data, epochs=args.epochs, verbose=0, shuffle=not args.generator,
                     validation_data=(x[:50], y[:50]), callbacks=callbacks)
except RuntimeError:
    if not args.catch:
        raise
    print("caught; going on to evaluate", file=sys.stderr)
ev = model.evaluate(x, y, batch_size=48, verbose=0)
pred = model.predict(x, batch_size=40, verbose=0)
out = {f"w{i}": w for i, w in enumerate(model.get_weights())}
out.update({f"h_{k}": np.asarray(v) for k, v in hist.history.items()})
out["evaluate"] = np.asarray(ev)
out["pred"] = pred
np.savez(f"{args.out}.rank{rank}.npz", **out)
print("done", rank, file=sys.stderr)
