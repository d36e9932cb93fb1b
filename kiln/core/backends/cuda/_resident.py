"""Variables on the device: one device copy per Variable, shared by every cuda program.

The protocol with :class:`kiln.Variable` (see the cuda backend's docs for the proposed
``variable.py`` change): a Variable that has ``_version`` (bumped by every host-side write:
``assign`` and the executor's update writes) and ``_device_pull`` (called by ``Variable.value``
while set) supports *residency*:

* a program uploads a Variable's host value when the device copy is missing or its recorded
  version differs from ``var._version`` (the host was written since);
* after a program updates a Variable on the device, :func:`mark_device_newer` sets
  ``var._device_pull`` to :func:`pull`, so the next read of ``var.value`` (``numpy()``,
  ``get_weights()``, another backend, saving) copies the device value back first;
* :func:`sync_to_host` pulls every Variable whose device copy is newer.

Variables without those attributes are uploaded before every run and updated on the host by
the executor (correct, slower): the backend works before and after the Variable change.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from kiln.core.backends.cuda._device import cuda_module


class Resident:
    """The device copy of one Variable: a flat device array, the host version it was last
    made equal to, and whether the device is newer than the host."""

    __slots__ = ("dev", "version", "device_newer", "__weakref__")

    def __init__(self, dev: Any, version: Any):
        self.dev = dev
        self.version = version
        self.device_newer = False


_residents: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def supports_residency(var: Any) -> bool:
    return hasattr(var, "_version") and hasattr(var, "_device_pull")


def _host_flat(var: Any) -> np.ndarray:
    value = var._value if hasattr(var, "_value") else np.asarray(var.value)
    return np.asarray(value, order="C").reshape(-1)


def resident(var: Any) -> Resident:
    """The device copy of ``var`` (created and uploaded on first use)."""
    res = _residents.get(var)
    if res is None:
        host = _host_flat(var)
        cuda = cuda_module()
        dev = cuda.to_device(host) if host.size else cuda.device_array(1, dtype=host.dtype)
        res = Resident(dev, getattr(var, "_version", None))
        _residents[var] = res
    return res


def refresh(var: Any, res: Resident, force: bool = False) -> None:
    """Uploads the host value when it may differ from the device copy."""
    if not force and supports_residency(var):
        if res.version == var._version:
            return
        res.device_newer = False
        if getattr(var, "_device_pull", None) is pull:
            var._device_pull = None
    elif res.device_newer:  # a Variable that lost residency support: keep the device value
        pull(var)
    host = _host_flat(var)
    if host.size:
        res.dev.copy_to_device(host)
    res.version = getattr(var, "_version", None)


def mark_device_newer(var: Any, res: Resident) -> None:
    res.device_newer = True
    res.version = getattr(var, "_version", None)
    if hasattr(var, "_device_pull"):
        var._device_pull = pull


def pull(var: Any) -> None:
    """Copies ``var``'s newer device value into its host array (the ``_device_pull`` hook)."""
    res = _residents.get(var)
    if hasattr(var, "_device_pull"):
        var._device_pull = None
    if res is None or not res.device_newer:
        return
    if supports_residency(var) and res.version != var._version:
        res.device_newer = False  # the host was written since (assign): the host value wins
        return
    host = var._value
    if host.size:
        if host.flags.c_contiguous:
            res.dev.copy_to_host(host.reshape(-1))
        else:  # pragma: no cover - Variables own contiguous arrays
            host[...] = res.dev.copy_to_host().reshape(host.shape)
    res.device_newer = False


def sync_to_host(variables: Any = None) -> None:
    """Copies Variables whose device copy is newer back to the host (all of them by default).

    Args:
        variables: an iterable of Variables, or None for every Variable on the device.
    """
    targets = list(_residents.keys()) if variables is None else list(variables)
    for var in targets:
        res = _residents.get(var)
        if res is not None and res.device_newer:
            pull(var)

