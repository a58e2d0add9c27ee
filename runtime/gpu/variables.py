"""DeviceVariables: a variable store {name: array} whose values may live on a GPU.

It is a mapping like the plain dict a CPU Session or Model keeps, so host code (the
reference kernels of host stages, Saver, Variable.load, CPU compiled code, export) reads
and writes it as before. What it guarantees:

- Reading an entry (`store[name]`, `get`, `items`, `values`) returns the CURRENT value as
  a host array: a value last written on the device is copied out first (into the host
  array the entry already had when its shape and dtype still fit, so callers that keep
  an array keep seeing it). The caller may then change that array in place, so the entry
  counts as changed on the host: the next GPU run copies it in again.
- `name in store`, `len`, iteration and `shape_of` never copy anything.
- GPU executables bind variables through `device_address` (copying a host value in only
  when the device copy is not current) and report writes with `written_on_device`, so a
  variable trained on the GPU stays there between runs and crosses to the host only when
  host code asks for it.
"""
import weakref
from collections.abc import MutableMapping

import numpy as np

from ..errors import GuardFailure, UninitializedVariable, VariableMismatch

__all__ = ["DeviceVariables"]

_HOST, _DEVICE, _BOTH = "host", "device", "both"  # where the current value is


class _DeviceCopy:
    __slots__ = ("address", "nbytes", "dtype", "shape")

    def __init__(self, address, nbytes, dtype, shape):
        self.address, self.nbytes, self.dtype, self.shape = address, nbytes, dtype, shape


class DeviceVariables(MutableMapping):
    """Variables of one device; see the module docstring."""

    def __init__(self, device, values=None):
        self.device = device
        self._host = {}      # name -> ndarray (may be stale when the place is _DEVICE)
        self._copies = {}    # name -> _DeviceCopy
        self._place = {}     # name -> _HOST | _DEVICE | _BOTH
        self._finalizer = weakref.finalize(self, _free_all, device, self._copies)
        for name, value in (values or {}).items():
            self[name] = value

    # --------------------------------------------------------- the mapping
    def __getitem__(self, name):
        place = self._place[name]
        if place == _DEVICE:
            self._copy_to_host(name)
        self._place[name] = _HOST  # the caller may change the array in place
        return self._host[name]

    def __setitem__(self, name, value):
        self._host[name] = value
        self._place[name] = _HOST

    def __delitem__(self, name):
        del self._place[name]
        self._host.pop(name, None)
        copy = self._copies.pop(name, None)
        if copy is not None:
            self.device.free(copy.address)

    def __contains__(self, name):
        return name in self._place

    def __iter__(self):
        return iter(list(self._place))

    def __len__(self):
        return len(self._place)

    def __repr__(self):
        return f"<DeviceVariables on {self.device.name}: {sorted(self._place)}>"

    def shape_of(self, name):
        """The shape of the current value, without copying it."""
        if self._place[name] == _DEVICE:
            return self._copies[name].shape
        return np.shape(self._host[name])

    def shapes(self):
        return {name: self.shape_of(name) for name in self._place}

    def on_device(self, name):
        """Whether the device holds the current value (tests and tools)."""
        return self._place.get(name) in (_DEVICE, _BOTH)

    # ------------------------------------------------------ the device side
    def device_address(self, name, dtype, shape, read, shape_guard=False):
        """The device address of variable `name` holding a `dtype` array of `shape` for a
        run that reads it (`read`) or only writes it; checks as the CPU runtime does."""
        place = self._place.get(name)
        if place is None:
            if read:
                raise UninitializedVariable(name)
            return self._fresh_device_copy(name, dtype, shape)
        have_dtype, have_shape = self._meta(name)
        if have_dtype != dtype or have_shape != shape:
            if read and shape_guard and have_dtype == dtype:
                raise GuardFailure(f"variable {name} has shape {list(have_shape)}, the code "
                                   f"was compiled for {list(shape)}")
            if read:
                raise VariableMismatch(
                    f"variable {name} holds a {have_dtype} array of shape "
                    f"{list(have_shape)}, the code was compiled for {dtype} {list(shape)}")
            return self._fresh_device_copy(name, dtype, shape)
        if place == _HOST:
            host = np.ascontiguousarray(self._host[name])
            copy = self._device_copy(name, dtype, shape)
            self.device.copy_in(copy.address, host)
            self._place[name] = _BOTH
            return copy.address
        return self._copies[name].address

    def written_on_device(self, name):
        self._place[name] = _DEVICE

    def read_copy(self, name):
        """A new host array with the current value (a fetch of the variable); the entry
        stays where it is."""
        if self._place[name] == _HOST:
            return np.array(self._host[name])
        copy = self._copies[name]
        out = np.empty(copy.shape, copy.dtype)
        self.device.copy_out(out, copy.address)
        return out

    def _meta(self, name):
        if self._place[name] == _DEVICE:
            copy = self._copies[name]
            return copy.dtype, copy.shape
        host = self._host[name]
        return np.asarray(host).dtype, np.shape(host)

    def _fresh_device_copy(self, name, dtype, shape):
        """A device buffer for a variable the run only writes (any old value is lost)."""
        copy = self._device_copy(name, dtype, shape)
        self._host.pop(name, None)
        self._place[name] = _DEVICE
        return copy.address

    def _device_copy(self, name, dtype, shape):
        """The device buffer of `name` sized for dtype/shape (reallocated if it is not)."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        copy = self._copies.get(name)
        if copy is None or copy.nbytes != nbytes:
            if copy is not None:
                self.device.free(copy.address)
            copy = self._copies[name] = _DeviceCopy(self.device.alloc(nbytes), nbytes,
                                                    dtype, tuple(shape))
        copy.dtype, copy.shape = dtype, tuple(shape)
        return copy

    def _copy_to_host(self, name):
        copy = self._copies[name]
        host = self._host.get(name)
        if not (isinstance(host, np.ndarray) and host.dtype == copy.dtype
                and host.shape == copy.shape and host.flags.c_contiguous
                and host.flags.writeable):
            host = self._host[name] = np.empty(copy.shape, copy.dtype)
        self.device.copy_out(host, copy.address)


def _free_all(device, copies):
    for copy in copies.values():
        try:
            device.free(copy.address)
        except Exception:  # noqa: BLE001 - at exit the device may be gone already
            pass
    copies.clear()
