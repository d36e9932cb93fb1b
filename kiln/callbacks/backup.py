"""BackupAndRestore: resume a training process that was killed, exactly where it stopped."""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
from typing import Any

from kiln import distribution
from kiln.callbacks.callback import Callback

BACKUP_NAME = "backup.h5"


class BackupAndRestore(Callback):
    """Backs up the whole training state regularly; a process killed at any moment and
    started again with the same script resumes from the last backup.

    A backup is one kiln checkpoint file (``backup_dir/backup.h5``, written atomically, see
    :func:`kiln.saving.save_checkpoint`): weights, optimizer slots and ``iterations``,
    the learning rate, the model's dropout RNG (seed and counter), kiln's global NumPy
    generator (shuffling), the epoch and the batch, the metrics accumulated so far in that
    epoch (a resumed epoch logs what an uninterrupted one would), and the state of every
    stateful callback of the same ``fit`` (``get_state``/``set_state``; EarlyStopping's
    patience, ReduceLROnPlateau's counters, History ...).

    On ``on_train_begin`` an existing backup is restored and ``model.resume_at(epoch, step,
    metric_states)`` tells ``fit`` where to continue: at the next epoch, or (``save_freq=N``)
    inside the epoch, skipping the batches already trained, in the same shuffled order. When
    ``fit`` ends normally the backup is deleted (unless ``delete_checkpoint=False``); when it
    is interrupted the backup stays.

    Args:
        backup_dir: the folder for the backup (created if needed). Use one folder per
            training run.
        save_freq: ``"epoch"`` (back up at each epoch end) or an int N (also every N batches).
        double_checkpoint: also keep the previous backup (``backup.h5.bkp``): when the last
            one cannot be read (a damaged file), training resumes from the one before.
        delete_checkpoint: delete the backup when training finishes (default True).

    Example:
        >>> model.fit(x, y, epochs=100, callbacks=[
        ...     kiln.callbacks.BackupAndRestore("/scratch/run42/backup")])
    """

    def __init__(self, backup_dir: str | os.PathLike, save_freq: str | int = "epoch",
                 double_checkpoint: bool = False, delete_checkpoint: bool = True):
        super().__init__()
        if not backup_dir:
            raise ValueError("BackupAndRestore: empty `backup_dir` argument")
        if save_freq != "epoch" and (isinstance(save_freq, bool) or
                                     not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(f"BackupAndRestore: invalid save_freq {save_freq!r}; expected "
                             "'epoch' or a positive integer (batches)")
        self.backup_dir = os.fspath(backup_dir)
        self.save_freq = save_freq
        self.double_checkpoint = bool(double_checkpoint)
        self.delete_checkpoint = bool(delete_checkpoint)
        self._path = os.path.join(self.backup_dir, BACKUP_NAME)
        self._prev_path = self._path + ".bkp"
        self._callback_list: Any = None
        self._list_given = False
        self._epoch = 0            # the epoch being trained (0-based)
        self._step = 0             # batches completed in that epoch
        self._batches_since_save = 0
        self._epoch_start_rng: Any = None
        self._finished = False
        self._deferred = False
        self._installed: list[tuple[Any, str]] = []
        self.restored: dict | None = None

    # ---- the other callbacks of this fit ---------------------------------------------------
    def set_callback_list(self, callbacks: Any) -> None:
        """Called by the trainer (optional): the CallbackList this callback belongs to.
        Without it, the CallbackList calling ``on_train_begin`` is found on the stack."""
        self._callback_list = callbacks
        self._list_given = callbacks is not None

    def _siblings(self) -> list[Callback]:
        cbl = self._callback_list
        if cbl is None:
            # Find the CallbackList that is calling this hook (it is on the stack).
            from kiln.callbacks.callback_list import CallbackList

            frame = inspect.currentframe()
            try:
                while frame is not None:
                    owner = frame.f_locals.get("self")
                    if isinstance(owner, CallbackList) and any(
                            cb is self for cb in owner.callbacks):
                        cbl = owner
                        break
                    frame = frame.f_back
            finally:
                del frame
            self._callback_list = cbl
        callbacks = list(getattr(cbl, "callbacks", cbl) or [])
        return [cb for cb in callbacks if cb is not self]

    def _all_callbacks(self) -> list[Callback]:
        self._siblings()
        return list(getattr(self._callback_list, "callbacks", self._callback_list) or [])

    # ---- state -----------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        return {}  # its progress lives in the backup itself

    def _save(self) -> None:
        from kiln.saving import save_checkpoint

        if not distribution.is_chief():  # several ranks: rank 0 writes, every rank reads
            return

        os.makedirs(self.backup_dir, exist_ok=True)
        if self.double_checkpoint and os.path.exists(self._path):
            shutil.copyfile(self._path, self._prev_path)
        extra: dict[str, Any] = {}
        if self._step > 0 and self._epoch_start_rng is not None:
            # Mid-epoch: resuming must replay this epoch's shuffle, so keep the generator
            # state from the start of the epoch.
            extra["epoch_start_rng"] = self._epoch_start_rng
        if self._step > 0:  # and the metrics accumulated so far in this epoch
            extra["metric_states"] = {m.name: m.get_state() for m in self.model.metrics}
        save_checkpoint(self.model, self._path, epoch=self._epoch, step=self._step,
                        callbacks=self._siblings(), extra=extra)

    def _restore(self) -> None:
        """Restores the backup, all or nothing: ``load_checkpoint`` checks the file and,
        through ``check``, what this callback restores beyond it (the generator state at
        the epoch's start, the metrics so far, the other callbacks' states) before anything
        is applied; a refused backup leaves the model and every callback unchanged."""
        from kiln.saving import load_checkpoint
        from kiln.saving.state import set_generator_state
        from kiln.saving.validate import check_backup_extra

        siblings = self._siblings()
        info = load_checkpoint(self.model, self._path, callbacks=None,
                               check=lambda found: check_backup_extra(
                                   self.model, found, siblings, repr(self._path)))
        epoch_start = info["extra"].get("epoch_start_rng")
        if info["step"] > 0 and epoch_start:
            set_generator_state(epoch_start)
            self._epoch_start_rng = epoch_start  # for later mid-epoch backups of this epoch
        self._restore_callback_states(siblings, info["callbacks"])
        self._epoch, self._step = info["epoch"], info["step"]
        # fit() reads this once, right after on_train_begin (and forgets it when it ends).
        self.model.resume_at(info["epoch"], info["step"],
                             info["extra"].get("metric_states") if info["step"] > 0 else None)
        self.restored = info

    def _restore_callback_states(self, siblings: list[Callback], states: dict) -> None:
        """Sets callback states; a callback whose ``on_train_begin`` has not run yet (it comes
        after this one) gets its state right after that hook, which resets it."""
        from kiln.saving.state import callback_keys

        everything = self._all_callbacks()
        position = {id(cb): i for i, cb in enumerate(everything)}
        mine = position.get(id(self), -1)
        for key, cb in zip(callback_keys(siblings), siblings):
            if key not in states:
                continue
            state = states[key]
            if position.get(id(cb), -1) < mine:
                cb.set_state(state)
                continue
            original = cb.on_train_begin

            def once(logs: dict | None = None, _cb: Any = cb, _orig: Any = original,
                     _state: Any = state) -> None:
                _orig(logs)
                with contextlib.suppress(AttributeError):
                    del _cb.on_train_begin  # drop the one-shot instance attribute
                _cb.set_state(_state)

            cb.on_train_begin = once  # type: ignore[method-assign]

    # ---- running after every other callback ------------------------------------------------
    def _install_after_last(self) -> None:
        """Saves must see the other callbacks' end-of-epoch/batch updates (ReduceLROnPlateau
        lowering the rate, History recording the epoch ...), so when callbacks follow this one
        the save runs right after the last one's hook (a one-fit instance wrapper)."""
        everything = self._all_callbacks()
        idx = next((i for i, cb in enumerate(everything) if cb is self), None)
        later = everything[idx + 1:] if idx is not None else []
        self._deferred = bool(later)
        if not later:
            return
        last = later[-1]
        for hook, after in (("on_epoch_end", self._epoch_done),
                            ("on_train_batch_end", self._batch_done)):
            original = getattr(last, hook)

            def wrapper(index: int, logs: dict | None = None, _orig: Any = original,
                        _after: Any = after) -> None:
                _orig(index, logs)
                _after(index)

            setattr(last, hook, wrapper)
            self._installed.append((last, hook))

    def _uninstall(self) -> None:
        for cb, hook in self._installed:
            with contextlib.suppress(AttributeError):
                delattr(cb, hook)
        self._installed = []
        self._deferred = False

    # ---- hooks -------------------------------------------------------------------------------
    def on_train_begin(self, logs: dict | None = None) -> None:
        self._uninstall()
        if not self._list_given:
            self._callback_list = None  # a new fit has a new CallbackList: look it up again
        self._finished = False
        self._batches_since_save = 0
        self.restored = None
        if os.path.exists(self._path):
            try:
                self._restore()
            except (OSError, ValueError):
                if not (self.double_checkpoint and os.path.exists(self._prev_path)):
                    raise
                # the last backup is damaged: resume from the one before
                shutil.copyfile(self._prev_path, self._path)
                self._restore()
        else:
            self._epoch, self._step = 0, 0
        self._install_after_last()

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        from kiln import random_state

        if epoch != self._epoch:
            self._step = 0
        self._epoch = epoch
        gen = random_state._state.get("rng")
        if self._step == 0 and gen is not None:
            self._epoch_start_rng = gen.bit_generator.state

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if not self._deferred:
            self._batch_done(batch)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if not self._deferred:
            self._epoch_done(epoch)

    def _batch_done(self, batch: int) -> None:
        # ``batch`` is the index of the last batch trained (with steps_per_execution > 1 the
        # hook runs once per execution of several batches): count batches, not calls.
        done = max(batch + 1, self._step + 1)
        added, self._step = done - self._step, done
        if self.save_freq == "epoch":
            return
        self._batches_since_save += added
        if self._batches_since_save >= self.save_freq:
            self._batches_since_save = 0
            self._save()

    def _epoch_done(self, epoch: int) -> None:
        self._epoch, self._step = epoch + 1, 0
        self._save()
        epochs = self.params.get("epochs") if self.params else None
        if epochs is not None and self._epoch >= int(epochs):
            self._finished = True

    def on_train_end(self, logs: dict | None = None) -> None:
        self._uninstall()
        epochs = self.params.get("epochs") if self.params else None
        done = self._finished or bool(getattr(self.model, "stop_training", False)) or (
            epochs is not None and self._epoch >= int(epochs))
        if done and self.delete_checkpoint and distribution.is_chief() and \
                os.path.isdir(self.backup_dir):
            for path in (self._path, self._prev_path):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
            with contextlib.suppress(OSError):
                os.rmdir(self.backup_dir)  # only if nothing else is in it

    def delete_backup(self) -> None:
        """Deletes the backup folder and everything in it."""
        shutil.rmtree(self.backup_dir, ignore_errors=True)
