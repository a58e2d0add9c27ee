"""gc.summary: TF1's tf.summary (scalar, histogram, image, audio, merge, merge_all,
FileWriter).

Importing this package does not import tensorboard; the summary functions and FileWriter
import its protos on first use and, without it, raise ImportError naming the extra
`pip install graphc[summary]`. The proto classes TF1 exposes here (Summary, Event,
SessionLog, ...) are loaded the same way, on first access."""
from graphc.summary.summary_ops import (audio, histogram, image, merge, merge_all,  # noqa: F401
                                       scalar)
from graphc.summary.writer import FileWriter  # noqa: F401

# the lazily loaded proto classes stay out of __all__: a star import must not need tensorboard
__all__ = ["scalar", "histogram", "image", "audio", "merge", "merge_all", "FileWriter"]

_PROTO_CLASSES = {"Summary": "summary_pb2", "SummaryDescription": "summary_pb2",
                  "HistogramProto": "summary_pb2",
                  "Event": "event_pb2", "SessionLog": "event_pb2", "TaggedRunMetadata": "event_pb2"}


def __getattr__(name):  # PEP 562: the proto classes load only when asked for
    if name in _PROTO_CLASSES:
        from graphc.summary import protos
        return getattr(getattr(protos, _PROTO_CLASSES[name])(), name)
    raise AttributeError(f"module 'graphc.summary' has no attribute {name!r}")
