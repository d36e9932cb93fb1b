"""Time-series forecasting with a recurrent network: from the last ``window`` readings of a
noisy seasonal signal, predict the reading ``horizon`` steps ahead (in the spirit of keras.io's
weather forecasting example, on a synthetic signal so it runs anywhere).

The model (``GRU`` -> ``Dense``) is compared with the naive forecast "the next reading is the
last one"; a model that learned the seasons beats it by a wide margin.

    python examples/timeseries_forecast.py [--quick] [--epochs N]
"""

import argparse
import time

import numpy as np

import kiln
from kiln import layers


def signal(n: int, seed: int = 0) -> np.ndarray:
    """Two seasons (periods 24 and 168 steps) and noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    x = (np.sin(2 * np.pi * t / 24) + 0.5 * np.sin(2 * np.pi * t / 168)
         + 0.2 * rng.normal(size=n))
    return x.astype("float32")


def windows(x: np.ndarray, window: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    count = len(x) - window - horizon + 1
    idx = np.arange(window)[None, :] + np.arange(count)[:, None]
    return x[idx][..., None], x[idx[:, -1] + horizon][:, None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (CI)")
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args()
    kiln.utils.set_random_seed(0)
    window, horizon = 48, 6
    series = signal(3000 if args.quick else 20000)
    split = int(len(series) * 0.8)
    mean, std = series[:split].mean(), series[:split].std()
    series = (series - mean) / std
    x_train, y_train = windows(series[:split], window, horizon)
    x_val, y_val = windows(series[split:], window, horizon)

    model = kiln.Sequential([
        layers.Input((window, 1)),
        layers.GRU(16 if args.quick else 32),
        layers.Dense(1),
    ])
    model.compile("adam", "mse", metrics=["mae"])
    t0 = time.perf_counter()
    model.fit(x_train, y_train, batch_size=64, epochs=args.epochs or (10 if args.quick else 20),
              validation_data=(x_val, y_val), verbose=2)
    mse = model.evaluate(x_val, y_val, verbose=0)[0]
    naive = float(np.mean((x_val[:, -1, 0] - y_val[:, 0]) ** 2))
    print(f"validation MSE {mse:.4f} vs {naive:.4f} for 'the last reading' "
          f"({naive / mse:.1f}x better); trained in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
