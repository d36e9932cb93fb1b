"""Host-side data preparation: kiln's TextVectorization and FeatureSpace on NumPy, and the
same objects inside tf.data (TF ops), against Keras 3's (TF backend) on the same data.

    python benchmarks/bench_text_data.py [--rows 20000]

Prints the best of 3 wall times per case (seconds). Needs keras and tensorflow for the
comparison rows.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def best(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20000)
    args = ap.parse_args()
    import keras
    import tensorflow as tf

    import kiln
    rng = np.random.RandomState(0)
    words = np.array([f"w{i}" for i in range(2000)])
    texts = np.array([" ".join(rng.choice(words, rng.randint(5, 30))) + "." for _ in
                      range(args.rows)])
    rows = []
    for mode in ("int", "multi_hot", "tf_idf"):
        kw = dict(max_tokens=1000, output_mode=mode)
        if mode == "int":
            kw["output_sequence_length"] = 32
        ours, theirs = kiln.layers.TextVectorization(**kw), keras.layers.TextVectorization(**kw)
        rows.append((f"TextVectorization({mode}).adapt",
                     best(lambda ours=ours: ours.adapt(texts), 1),
                     best(lambda theirs=theirs: theirs.adapt(texts), 1)))
        rows.append((f"TextVectorization({mode}) call, NumPy",
                     best(lambda ours=ours: ours(texts)),
                     best(lambda theirs=theirs: np.asarray(theirs(texts)))))
        ds = tf.data.Dataset.from_tensor_slices(texts).batch(256)
        rows.append((f"TextVectorization({mode}) in tf.data",
                     best(lambda ds=ds, ours=ours: [None for _ in ds.map(ours)]),
                     best(lambda ds=ds, theirs=theirs: [None for _ in ds.map(theirs)])))
    table = {"x": rng.randn(args.rows).astype("float32"),
             "c": rng.choice(["a", "b", "c", "d"], args.rows),
             "i": rng.randint(0, 10, args.rows)}
    feats = lambda ns: {"x": ns.float_normalized(), "c": ns.string_categorical(),  # noqa: E731
                        "i": ns.integer_categorical()}
    crosses = lambda ns: [ns.cross(("c", "i"), 16)]  # noqa: E731
    ours = kiln.utils.FeatureSpace(feats(kiln.utils.FeatureSpace),
                                   crosses=crosses(kiln.utils.FeatureSpace))
    theirs = keras.utils.FeatureSpace(feats(keras.utils.FeatureSpace),
                                      crosses=crosses(keras.utils.FeatureSpace))
    rows.append(("FeatureSpace.adapt(dict)", best(lambda: ours.adapt(table), 1),
                 best(lambda: theirs.adapt(table), 1)))
    rows.append(("FeatureSpace call, NumPy dict", best(lambda: ours(table)),
                 best(lambda: np.asarray(theirs(table)))))
    ds = tf.data.Dataset.from_tensor_slices(table).batch(256)
    rows.append(("FeatureSpace in tf.data", best(lambda: [None for _ in ds.map(ours)]),
                 best(lambda: [None for _ in ds.map(theirs)])))
    print(f"{args.rows} rows; seconds, best of 3 (adapt: 1 run)")
    print(f"{'case':44s} {'kiln':>8s} {'keras':>8s}")
    for name, a, b in rows:
        print(f"{name:44s} {a:8.3f} {b:8.3f}")


if __name__ == "__main__":
    main()
