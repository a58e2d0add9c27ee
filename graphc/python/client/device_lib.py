"""tensorflow.python.client.device_lib: the devices of this process."""
from typing import NamedTuple

from graphc.session import local_devices

__all__ = ["list_local_devices"]


class LocalDevice(NamedTuple):
    """The fields of TF's DeviceAttributes proto that graphc knows."""
    name: str  # "/device:CPU:0", TF's local device name (no job/replica/task)
    device_type: str
    memory_limit: int  # bytes; 0 where the device does not say
    incarnation: int
    physical_device_desc: str


def list_local_devices(session_config=None):
    """The CPU, and GPU 0 when the process can open one (session_config is accepted and
    changes nothing: graphc has no per-process device options)."""
    return [LocalDevice("/" + d.name.rsplit("/", 1)[-1], d.device_type, d.memory_limit_bytes,
                        d.incarnation, f"device: {d.device_type.lower()}")
            for d in local_devices()]
