"""Every example runs with ``--quick`` (one short epoch) and prints its test accuracy.

Slow (about 10-60 s per example on 2 cores; a few minutes in all with a cold kernel cache):
marked ``slow`` so that ``pytest -m "not slow"`` leaves them out.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
ACCURACY = re.compile(r"test accuracy[^:\n]*:?\s+(0?\.\d+|1\.0+)\b", re.I)


@functools.cache
def run_example(name: str, timeout: int = 600) -> str:
    """The output of ``python examples/NAME --quick`` (run once per test session)."""
    env = dict(os.environ, KILN_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / name), "--quick"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{name} --quick exited with {proc.returncode}:\n{output[-4000:]}"
    return output


def test_every_example_is_listed():
    expected = {"mnist_mlp.py", "mnist_convnet.py", "fashion_mnist.py",
                "functional_multi_io.py", "custom_layer.py", "resume_training.py"}
    assert expected <= set(EXAMPLES)


# Examples whose quick run prints another figure than a test accuracy (checked below).
NO_ACCURACY = {"timeseries_forecast.py"}


@pytest.mark.parametrize("name", [n for n in EXAMPLES if n not in NO_ACCURACY])
def test_example_runs_quick_and_prints_its_test_accuracy(name):
    output = run_example(name)
    found = [float(m.group(1)) for m in ACCURACY.finditer(output)]
    assert found, f"{name} printed no test accuracy:\n{output[-3000:]}"
    assert all(0.0 <= a <= 1.0 for a in found)
    # Even one short epoch learns something (chance is 0.1 for ten classes).
    assert max(found) > 0.3, output[-3000:]


def test_mnist_convnet_says_which_data_it_trains_on():
    output = run_example("mnist_convnet.py")
    assert "Training on the MNIST sample shipped with kiln" in output


def test_resume_training_resumes_after_sigkill_with_identical_weights():
    output = run_example("resume_training.py")
    assert "SIGKILL" in output
    assert "exit code -9" in output or "exit code 137" in output
    assert "this run resumed from the backup" in output
    assert "Backup deleted after the finished run: True" in output
    diff = re.search(r"Largest weight difference [^:]*: ([-+.\deE]+)", output)
    assert diff is not None and float(diff.group(1)) == 0.0, output[-3000:]


def test_timeseries_forecast_beats_the_naive_forecast():
    output = run_example("timeseries_forecast.py")
    found = re.search(r"validation MSE ([0-9.]+) vs ([0-9.]+) for 'the last reading'", output)
    assert found, output[-3000:]
    assert float(found.group(1)) < 0.7 * float(found.group(2)), output[-3000:]


def test_text_classifier_learns_the_order_dependent_task():
    output = run_example("text_classification_lstm.py")
    accuracy = [float(m.group(1)) for m in ACCURACY.finditer(output)]
    assert accuracy and accuracy[-1] > 0.9, output[-3000:]


def test_transformer_beats_the_bag_of_embeddings():
    output = run_example("transformer_classifier.py")
    scores = dict(re.findall(r"(bag-of-embeddings|transformer): test accuracy (0\.\d+)", output))
    assert set(scores) == {"bag-of-embeddings", "transformer"}, output[-3000:]
    assert float(scores["transformer"]) > float(scores["bag-of-embeddings"]) + 0.03, \
        output[-3000:]
