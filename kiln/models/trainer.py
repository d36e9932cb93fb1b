"""The training API of :class:`~kiln.models.Model`: ``compile``, ``fit``, ``evaluate``,
``predict`` and the ``*_on_batch`` methods, assembled from four parts that change for
different reasons:

* :mod:`.compile_utils`: what ``compile()`` decides (optimizer, per-output losses/metrics);
* :mod:`.standardize`: user data -> checked, typed feed arrays;
* :mod:`.step_graphs`: the compiled train/test steps and predict function (one graph each),
  and which of them a ``*_on_batch`` call runs;
* :mod:`.custom_steps`: an overridden ``train_step``/``test_step``/``predict_step`` (or
  ``compute_loss``/``compute_metrics``), traced into the compiled step;
* :mod:`.eager_loop`: the same steps define-by-run (``compile(run_eagerly=True)``);
* :mod:`.loops`: the plain Python loops around them, driven by callbacks.
"""

from __future__ import annotations

from typing import Any

from kiln import metrics as metrics_module
from kiln.models.compile_utils import CompileMixin
from kiln.models.custom_steps import CustomStepsMixin
from kiln.models.eager_loop import EagerLoopMixin
from kiln.models.loops import LoopsMixin
from kiln.models.standardize import StandardizeMixin
from kiln.models.step_graphs import StepGraphsMixin


class Trainer(LoopsMixin, CustomStepsMixin, EagerLoopMixin, StepGraphsMixin, StandardizeMixin,
              CompileMixin):
    """Mixin with the training API; see :class:`kiln.models.Model`."""

    compiled = False
    optimizer: Any = None
    stop_training = False
    history: Any = None
    train_function: Any = None
    test_function: Any = None
    predict_function: Any = None
    _rng_seed: int | None = None
    _rng_counter = 0
    _compile_args: dict | None = None
    _outputs: list | None = None
    _steps_per_execution = 1

    def _init_trainer(self) -> None:
        self.compiled = False
        self.optimizer = None
        self.stop_training = False
        self.history = None
        self._rng_seed = None
        self._rng_counter = 0
        self._train_fns: dict = {}  # (target specs, sample-weight specs) -> _Step
        self._test_fns: dict = {}
        self._predict_fns: dict = {}
        self.train_function = None
        self.test_function = None
        self.predict_function = None
        self._compile_args = None
        self._steps_per_execution = 1
        self._outputs = None  # per-output losses and metrics, resolved at the first step
        self._batch_cache: dict = {}  # the *_on_batch fast path
        self._loss_tracker = metrics_module.Mean(name="loss")


__all__ = ["Trainer"]
