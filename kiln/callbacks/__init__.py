"""Training callbacks (Keras 3 names, arguments and semantics).

The trainer drives a :class:`CallbackList`; callbacks see the model through a small
interface: ``model.stop_training``, ``model.optimizer`` (its ``learning_rate`` property),
``model.get_weights()`` / ``model.set_weights()``, ``model.save(path)`` and
``model.save_weights(path)``.

Example:
    >>> model.fit(x, y, epochs=50, validation_split=0.1, callbacks=[
    ...     kiln.callbacks.EarlyStopping(patience=3, restore_best_weights=True),
    ...     kiln.callbacks.ModelCheckpoint("best.weights.h5", save_weights_only=True,
    ...                                    save_best_only=True),
    ...     kiln.callbacks.ReduceLROnPlateau(factor=0.5, patience=2)])
"""

from kiln.callbacks.backup import BackupAndRestore
from kiln.callbacks.callback import Callback
from kiln.callbacks.callback_list import CallbackList
from kiln.callbacks.early_stopping import EarlyStopping
from kiln.callbacks.history import History
from kiln.callbacks.misc import CSVLogger, LambdaCallback, LearningRateScheduler, TerminateOnNaN
from kiln.callbacks.model_checkpoint import ModelCheckpoint
from kiln.callbacks.orbax_checkpoint import OrbaxCheckpoint
from kiln.callbacks.progbar_logger import ProgbarLogger
from kiln.callbacks.reduce_lr_on_plateau import ReduceLROnPlateau
from kiln.callbacks.remote_monitor import RemoteMonitor
from kiln.callbacks.swap_ema_weights import SwapEMAWeights
from kiln.callbacks.tensorboard import TensorBoard

__all__ = ["BackupAndRestore", "Callback", "CallbackList", "History", "ProgbarLogger",
           "EarlyStopping", "ModelCheckpoint", "ReduceLROnPlateau", "LearningRateScheduler",
           "CSVLogger", "TerminateOnNaN", "LambdaCallback", "TensorBoard", "SwapEMAWeights",
           "RemoteMonitor", "OrbaxCheckpoint"]
