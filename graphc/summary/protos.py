"""The TensorBoard protobuf modules, imported on first use.

graphc does not depend on tensorboard: `import graphc` works without it, and only a
summary function that needs a proto imports it, failing with the name of the extra."""
import importlib

_INSTALL_HINT = ("gc.summary writes TensorBoard files with the `tensorboard` package, which "
                 "is not installed. Install it with: pip install graphc[summary]")


def _import(module):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{_INSTALL_HINT} ({e})") from e


def summary_pb2():
    return _import("tensorboard.compat.proto.summary_pb2")


def event_pb2():
    return _import("tensorboard.compat.proto.event_pb2")
