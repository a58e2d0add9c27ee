"""FileWriter: TF1's tf.summary.FileWriter, writing TensorBoard event files.

An event file is a TFRecord stream of `Event` protos: first one with the file version,
then graphs, summaries and session logs, each with its wall time and step. The file is
named events.out.tfevents.<seconds>.<host><suffix> as TF1 names it. Events are written
on the caller's thread to a buffered file; it is flushed when `max_queue` events are
pending, when `flush_secs` have passed since the last flush, and on flush()/close()."""
import os
import socket
import time

import numpy as np

from graphc.framework.graph import Graph
from graphc.summary import protos
from graphc.summary.graph_def import graph_def as graph_def_of
from graphc.tf_formats import records


def _event_file_name(logdir, suffix):
    base = os.path.join(logdir, f"events.out.tfevents.{int(time.time()):010d}."
                                f"{socket.gethostname()}")
    name, n = base + suffix, 1
    while os.path.exists(name):  # a second writer in the same second and directory
        name, n = f"{base}.{n}{suffix}", n + 1
    return name


def _summary_proto(summary):
    """A Summary proto from a proto, serialized bytes, or what Session.run returned."""
    pb = protos.summary_pb2()
    if isinstance(summary, pb.Summary):
        return summary
    if isinstance(summary, np.ndarray):
        if summary.size != 1:
            raise ValueError(f"add_summary takes one serialized Summary, got an array of "
                             f"shape {summary.shape}")
        summary = summary.reshape(()).item()
    if not isinstance(summary, (bytes, bytearray)):
        raise TypeError(f"add_summary takes a Summary proto or its serialized bytes, got "
                        f"{type(summary).__name__}")
    proto = pb.Summary()
    proto.ParseFromString(bytes(summary))
    return proto


class FileWriter:
    """Writes summaries, graphs and session logs to an event file in `logdir`."""

    def __init__(self, logdir, graph=None, max_queue=10, flush_secs=120, graph_def=None,
                 filename_suffix=None, session=None):
        self._event_pb2 = protos.event_pb2()
        records.crc32c(b"")  # fails now, naming the extra, if google-crc32c is missing
        self._logdir = str(logdir)
        self._max_queue, self._flush_secs = max_queue, flush_secs
        self._suffix = filename_suffix or ""
        self._run_metadata_tags = set()
        self._open()
        if graph is not None or graph_def is not None:
            self.add_graph(graph, graph_def=graph_def)

    def _open(self):
        os.makedirs(self._logdir, exist_ok=True)
        self._path = _event_file_name(self._logdir, self._suffix)
        self._records = records.RecordWriter(self._path)
        self._closed, self._pending, self._last_flush = False, 0, time.time()
        self.add_event(self._event_pb2.Event(file_version="brain.Event:2"))
        self.flush()

    # ----------------------------------------------------------------- events
    def add_event(self, event):
        """Writes one Event proto (its wall_time is set now if it has none).
        Events added after close() are dropped, as in TF1."""
        if self._closed:
            return
        if not event.wall_time:
            event.wall_time = time.time()
        self._records.write(event.SerializeToString())
        self._pending += 1
        if self._pending >= self._max_queue or time.time() - self._last_flush >= self._flush_secs:
            self.flush()

    def _add(self, global_step, **fields):
        event = self._event_pb2.Event(**fields)
        if global_step is not None:
            event.step = int(global_step)
        self.add_event(event)

    def add_summary(self, summary, global_step=None):
        """Adds a Summary: the proto, or the serialized bytes a summary op returns."""
        self._add(global_step, summary=_summary_proto(summary))

    def add_graph(self, graph, global_step=None, graph_def=None):
        """Adds a graph (a gc.Graph, or a GraphDef proto) for TensorBoard's graph tab."""
        if isinstance(graph, Graph):
            graph_def = graph_def_of(graph)
        elif graph is not None:
            graph_def = graph  # a GraphDef passed positionally, as TF1 allows
        if graph_def is None:
            raise TypeError("add_graph needs a gc.Graph or a GraphDef")
        self._add(global_step, graph_def=graph_def.SerializeToString())

    def add_run_metadata(self, run_metadata, tag, global_step=None):
        """Adds a run's metadata under `tag` (each tag once), as TensorBoard's
        TaggedRunMetadata. graphc's RunMetadata holds no step stats (graphc collects none):
        the tag appears with an empty trace; a protobuf RunMetadata is written as it is."""
        if tag in self._run_metadata_tags:
            raise ValueError("The provided tag was already used for this event type")
        self._run_metadata_tags.add(tag)
        serialize = getattr(run_metadata, "SerializeToString", None)
        data = serialize() if serialize is not None else b""
        tagged = self._event_pb2.TaggedRunMetadata(tag=tag, run_metadata=data)
        self._add(global_step, tagged_run_metadata=tagged)

    def add_session_log(self, session_log, global_step=None):
        self._add(global_step, session_log=session_log)

    # -------------------------------------------------------------- lifecycle
    def get_logdir(self):
        return self._logdir

    def flush(self):
        """Writes every pending event to disk."""
        if not self._closed:
            self._records.flush()
            self._pending, self._last_flush = 0, time.time()

    def close(self):
        """Flushes and closes the event file; reopen() starts a new one."""
        if not self._closed:
            self.flush()
            self._records.close()
            self._closed = True

    def reopen(self):
        if self._closed:
            self._open()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
