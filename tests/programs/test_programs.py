"""Real Keras programs run unchanged (up to imports, offline data and epochs) on kiln.

Each ``pNN_*.py`` in this folder is a keras.io guide or example (its docstring names the source
and lists every adaptation). This test runs each in a fresh process (working directory: a
temporary folder, since the programs write files as the originals do) and checks its exit code
and, where it prints a metric, a sanity bound on it. Programs that kiln cannot run yet are
``xfail(strict=True)`` with the reason: when kiln learns the missing piece the test says so.

``with_keras.py`` runs the same files on real Keras 3 for reference (never from this suite).
Slow (one compile per program; a few minutes in all with a warm kernel cache).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
PROGRAMS = sorted(p.name for p in HERE.glob("p[0-9][0-9]_*.py"))

# program -> why kiln cannot run it yet (the first failure; later ones are in
# docs/keras-compatibility.md, "Programs")
KNOWN_GAPS: dict[str, str] = {}

# program -> (regex with one float group, lower bound, upper bound)
BOUNDS = {
    "p01_mnist_convnet.py": (r"Test accuracy: ([0-9.]+)", 0.3, 1.0),
    "p03_functional_api.py": (r"Test accuracy: ([0-9.]+)", 0.3, 1.0),
    # the first "test loss, test acc" (the guide ends with an untrained model's evaluation)
    "p04_training_with_built_in_methods.py": (
        r"(?m)^test loss, test acc: \[[0-9.e+-]+, ([0-9.]+)\]", 0.3, 1.0),
    "p05_custom_train_step.py": (r"final d_loss: ([0-9.e+-]+)", 0.0, 5.0),
    "p06_subclassing_layers_and_models.py": (r"final loss: ([0-9.e+-]+)", 0.0, 1.0),
    "p09_vae.py": (r"final loss: ([0-9.e+-]+)", 0.0, 600.0),
    "p10_text_classification_with_transformer.py": (r"val accuracy: ([0-9.]+)", 0.0, 1.0),
    "p11_timeseries_classification.py": (r"Test accuracy ([0-9.]+)", 0.6, 1.0),
    "p12_antirectifier.py": (r"Test accuracy: ([0-9.]+)", 0.3, 1.0),
}


def run_program(name: str, workdir: str, timeout: int = 900) -> tuple[int, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", KILN_DATASETS_OFFLINE="1")
    proc = subprocess.run([sys.executable, str(HERE / name)], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def test_there_are_programs_and_each_names_its_source():
    assert len(PROGRAMS) >= 15
    for name in PROGRAMS:
        head = (HERE / name).read_text().split('"""')[1]
        assert "keras-team/keras-io" in head and "Adaptations:" in head, name
        assert "import kiln as keras" in (HERE / name).read_text(), name


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[n]))
    if n in KNOWN_GAPS else n for n in PROGRAMS])
def test_program_runs_on_kiln(name, tmp_path):
    code, output = run_program(name, str(tmp_path))
    assert code == 0, f"{name} exited with {code}:\n{output[-4000:]}"
    if name in BOUNDS:
        pattern, low, high = BOUNDS[name]
        found = re.findall(pattern, output)
        assert found, f"{name} printed no {pattern!r}:\n{output[-3000:]}"
        value = float(found[0])
        assert math.isfinite(value) and low <= value <= high, (name, value)


def test_keras_source_swaps_only_the_imports():
    sys.path.insert(0, str(HERE))
    try:
        from with_keras import keras_source
    finally:
        sys.path.remove(str(HERE))
    text = "import kiln as keras\nfrom kiln import layers\nfrom kiln import ops\nx = 'kiln'\n"
    assert keras_source(text) == ("import keras\nfrom keras import layers\n"
                                  "from keras import ops\nx = 'kiln'\n")
