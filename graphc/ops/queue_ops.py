"""Queues (TF1's FIFOQueue, PaddingFIFOQueue and RandomShuffleQueue): host ops whose state,
the queued elements, lives in the Session, so that queue runner threads enqueue while the
training step dequeues.

The queue op outputs a handle (its name); enqueue, dequeue, close and size ops take it.
A dequeue waits for enough elements; once the queue is closed it takes what is left and
then raises OutOfRangeError, the end-of-input signal that Coordinator and
MonitoredSession treat as a clean stop. An enqueue waits for room and raises
CancelledError once the queue is closed. As in TF1 a wait has no end of its own (a
dequeue nobody feeds waits); ConfigProto(operation_timeout_in_ms=...) bounds it with
DeadlineExceededError.
"""
import threading
import time

import numpy as np

from graphc import dtypes
from graphc.errors import KernelError, CancelledError, DeadlineExceededError, OutOfRangeError
from graphc.framework.graph import get_default_graph
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.tensor_shape import TensorShape, as_shape
from graphc.ops.constant_ops import convert_to_tensor

__all__ = ["FIFOQueue", "PaddingFIFOQueue", "RandomShuffleQueue", "QueueBase"]


class _QueueState:
    """The elements of one queue in one Session, and the waiting on them."""

    def __init__(self, name, capacity, min_after_dequeue=0, rng=None, pads=False):
        self.name, self.capacity = name, capacity
        self.pads = pads  # a PaddingFIFOQueue: batches pad their components
        self.min_after_dequeue, self.rng = min_after_dequeue, rng
        self.elements = []
        self.closed = False
        self.cond = threading.Condition()

    def _wait(self, ready, timeout_s, what):
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not ready():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise KernelError(f"Timed out waiting to {what} queue '{self.name}' "
                                  f"(operation_timeout_in_ms)", DeadlineExceededError)
            self.cond.wait(left if left is not None else 1.0)

    def put(self, rows, timeout_s):
        with self.cond:
            for row in rows:
                self._wait(lambda: self.closed or len(self.elements) < self.capacity,
                           timeout_s, "enqueue to")
                if self.closed:
                    raise KernelError(f"Queue '{self.name}' is closed.", CancelledError)
                self.elements.append(row)
                self.cond.notify_all()

    def take(self, n, up_to, timeout_s):
        """n elements (fewer, at least one, when up_to and the queue is closed). Elements
        are taken as they arrive, freeing room for enqueues (so n may exceed the
        capacity); if the queue closes first they go back to its front, as TF1's."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self.cond:
            taken = []
            while len(taken) < n:
                spare = len(self.elements) - (0 if self.closed else self.min_after_dequeue)
                if spare > 0:
                    taken.extend(self._pop(min(n - len(taken), spare)))
                    self.cond.notify_all()
                    continue
                if self.closed:
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self.elements[:0] = taken
                    raise KernelError(f"Timed out waiting to dequeue from queue "
                                      f"'{self.name}' (operation_timeout_in_ms)",
                                      DeadlineExceededError)
                self.cond.wait(left if left is not None else 1.0)
            if len(taken) < n and not (up_to and taken):
                self.elements[:0] = taken
                raise KernelError(f"Queue '{self.name}' is closed and has insufficient "
                                  f"elements (requested {n}, current size "
                                  f"{len(self.elements)})", OutOfRangeError)
            return taken

    def _pop(self, count):
        if self.rng is None:
            taken, self.elements = self.elements[:count], self.elements[count:]
            return taken
        picks = self.rng.choice(len(self.elements), count, replace=False).tolist()
        taken = [self.elements[i] for i in picks]
        chosen = set(picks)
        self.elements = [e for i, e in enumerate(self.elements) if i not in chosen]
        return taken

    def close(self, cancel_pending_enqueues):
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def _timeout_s(state):
    ms = state.operation_timeout_ms
    return ms / 1000.0 if ms else None


def _queue_kernel(state, op):
    queues = state.queues
    if op.name not in queues:
        shuffle = op.type == "RandomShuffleQueueV2"
        queues[op.name] = _QueueState(op.name, op.attrs["capacity"],
                                      op.attrs.get("min_after_dequeue", 0),
                                      state.rng_for(op) if shuffle else None,
                                      pads=op.type == "PaddingFIFOQueueV2")
    return np.array(op.name, dtype=object)


def _handle_infer(inputs, a):
    return TensorShape([]), dtypes.string


def _check_components(op, components):
    for i, (c, dtype, shape) in enumerate(zip(components, op.attrs["component_types"],
                                              op.attrs["shapes"] or [None] * len(components))):
        if c.dtype != dtypes.as_dtype(dtype).np:
            raise KernelError(f"component {i} of the enqueued element is {c.dtype}, the "
                              f"queue holds {dtypes.as_dtype(dtype).name}")
        if shape is not None and not as_shape(shape).is_compatible_with(c.shape):
            raise KernelError(f"component {i} of the enqueued element has shape {c.shape}, "
                              f"the queue's is {as_shape(shape)}")


def _enqueue_kernel(state, op, handle, *components):
    components = [np.array(c, copy=True) for c in components]
    if op.type == "QueueEnqueueManyV2":
        counts = {c.shape[0] if c.ndim else None for c in components}
        if len(counts) != 1 or None in counts:
            raise KernelError("enqueue_many: every component needs the same first "
                              "dimension (the number of elements)")
        # each element an array of its component's dtype (a string component's rows
        # would otherwise be bare bytes)
        rows = [[np.asarray(v, c.dtype) for v, c in zip(row, components)]
                for row in zip(*components)]
    else:
        rows = [components]
    for row in rows:
        _check_components(op, row)
    state.resource("queues", handle).put(rows, _timeout_s(state))
    return []


def _dequeue_kernel(state, op, handle, n=None):
    many = n is not None
    count = int(n) if many else 1
    if count < 0:
        raise KernelError(f"dequeue_many: n must be >= 0, got {count}")
    queue = state.resource("queues", handle)
    taken = queue.take(count, op.type == "QueueDequeueUpToV2", _timeout_s(state))
    types = op.attrs["component_types"]
    if not many:
        return list(taken[0])
    if not taken:
        shapes = op.attrs["shapes"]
        return [np.zeros([0] + [d or 0 for d in as_shape(s).as_list()], dtypes.as_dtype(t).np)
                for s, t in zip(shapes, types)]
    if queue.pads:
        return [_padded_stack([row[i] for row in taken], dtypes.as_dtype(types[i]))
                for i in range(len(types))]
    return [np.stack([row[i] for row in taken]) for i in range(len(types))]


def _padded_stack(parts, dtype):
    """The parts stacked, each padded at the end of every dimension to the largest (with
    zeros, or b"" for strings), as TF1's PaddingFIFOQueue batches."""
    dims = [max(p.shape[d] for p in parts) for d in range(parts[0].ndim)]
    out = np.full([len(parts)] + dims, b"" if dtype == dtypes.string else 0, dtype.np)
    for i, part in enumerate(parts):
        out[(i,) + tuple(slice(0, d) for d in part.shape)] = part
    return out


def _dequeue_infer(inputs, a):
    shapes = a["shapes"] or [None] * len(a["component_types"])
    many = len(inputs) == 2
    out = []
    for t, s in zip(a["component_types"], shapes):
        shape = TensorShape(None) if s is None else as_shape(s)
        if many:
            shape = TensorShape([None]).concatenate(shape) if s is not None else TensorShape(None)
        out.append((shape, dtypes.as_dtype(t)))
    return out


# host-only: a queue is Python state in the Session, and its ops wait on other threads
_QUEUE_OP = dict(stateful=True, uses_context=True, kind="opaque", host_only=True)
for _type in ("FIFOQueueV2", "PaddingFIFOQueueV2", "RandomShuffleQueueV2"):
    register_op(_type, infer=_handle_infer, kernel=_queue_kernel, **_QUEUE_OP)
for _type in ("QueueEnqueueV2", "QueueEnqueueManyV2"):
    register_op(_type, infer=lambda inputs, a: [], kernel=_enqueue_kernel, **_QUEUE_OP)
for _type in ("QueueDequeueV2", "QueueDequeueManyV2", "QueueDequeueUpToV2"):
    register_op(_type, infer=_dequeue_infer, kernel=_dequeue_kernel, **_QUEUE_OP)
register_op("QueueCloseV2", infer=lambda inputs, a: [], **_QUEUE_OP,
            kernel=lambda state, op, handle: state.resource("queues", handle).close(
                op.attrs["cancel_pending_enqueues"]) or [])
register_op("QueueSizeV2", infer=lambda inputs, a: (TensorShape([]), dtypes.int32),
            **_QUEUE_OP,
            kernel=lambda state, op, handle: np.int32(len(
                state.resource("queues", handle).elements)))
register_op("QueueIsClosedV2", infer=lambda inputs, a: (TensorShape([]), dtypes.bool),
            **_QUEUE_OP,
            kernel=lambda state, op, handle: np.bool_(state.resource("queues", handle).closed))
not_differentiable("FIFOQueueV2", "PaddingFIFOQueueV2", "RandomShuffleQueueV2",
                   "QueueEnqueueV2",
                   "QueueEnqueueManyV2", "QueueDequeueV2", "QueueDequeueManyV2",
                   "QueueDequeueUpToV2", "QueueCloseV2", "QueueSizeV2", "QueueIsClosedV2")

QUEUE_OP_TYPES = frozenset({"FIFOQueueV2", "PaddingFIFOQueueV2", "RandomShuffleQueueV2",
                            "QueueEnqueueV2",
                            "QueueEnqueueManyV2", "QueueDequeueV2", "QueueDequeueManyV2",
                            "QueueDequeueUpToV2", "QueueCloseV2", "QueueSizeV2",
                            "QueueIsClosedV2"})


def _shape_list(shapes):
    """TF1's reading of a queue's shapes: one shape when every item is an int or None
    (so [] is one scalar shape, not an empty list of shapes), else a list of shapes."""
    if isinstance(shapes, TensorShape) or not isinstance(shapes, (list, tuple)):
        shapes = [shapes]
    elif all(s is None or isinstance(s, int) for s in shapes):
        shapes = [shapes]
    return [as_shape(s) for s in shapes]


class QueueBase:
    """A queue of elements, each a list of tensors of `dtypes` (and `shapes`, needed by
    dequeue_many)."""

    def __init__(self, op_type, capacity, dtypes_, shapes, names, name, extra_attrs):
        self._dtypes = [dtypes.as_dtype(d) for d in (dtypes_ if isinstance(dtypes_, (list, tuple))
                                                     else [dtypes_])]
        if shapes is not None:
            shapes = _shape_list(shapes)
            if len(shapes) != len(self._dtypes):
                raise ValueError(f"Queue shapes must have the same length as dtypes, got "
                                 f"{len(shapes)} and {len(self._dtypes)}")
        self._shapes = shapes
        self._names = list(names) if names is not None else None
        attrs = {"capacity": int(capacity), "component_types": self._dtypes,
                 "shapes": shapes or [], **extra_attrs}
        graph = get_default_graph()
        self._handle = graph.create_op(op_type, [], attrs, name or op_type).outputs[0]
        self._graph = graph

    name = property(lambda self: self._handle.op.name)
    queue_ref = property(lambda self: self._handle)
    dtypes = property(lambda self: list(self._dtypes))
    shapes = property(lambda self: list(self._shapes or []))
    names = property(lambda self: self._names)

    def _attrs(self):
        return {"component_types": self._dtypes, "shapes": self._shapes or []}

    def _components(self, vals):
        if isinstance(vals, dict):
            if self._names is None:
                raise ValueError("Queue must have names to enqueue a dictionary")
            vals = [vals[n] for n in self._names]
        elif not isinstance(vals, (list, tuple)):
            vals = [vals]
        if len(vals) != len(self._dtypes):
            raise ValueError(f"Expected {len(self._dtypes)} components, got {len(vals)}")
        with self._graph.as_default():
            return [convert_to_tensor(v, dtype=d) for v, d in zip(vals, self._dtypes)]

    def _packed(self, outputs):
        if self._names is not None:
            return dict(zip(self._names, outputs))
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def enqueue(self, vals, name=None):
        return self._graph.create_op("QueueEnqueueV2", [self._handle] + self._components(vals),
                                     self._attrs(), name or "enqueue")

    def enqueue_many(self, vals, name=None):
        return self._graph.create_op("QueueEnqueueManyV2",
                                     [self._handle] + self._components(vals), self._attrs(),
                                     name or "enqueue_many")

    def dequeue(self, name=None):
        op = self._graph.create_op("QueueDequeueV2", [self._handle], self._attrs(),
                                   name or "dequeue")
        return self._packed(op.outputs)

    def _dequeue_n(self, op_type, n, name):
        if self._shapes is None:
            raise ValueError(f"{op_type}: all components of the queue must have specified "
                             "shapes")
        with self._graph.as_default():
            n = convert_to_tensor(n, dtype=dtypes.int32)
        op = self._graph.create_op(op_type, [self._handle, n], self._attrs(), name)
        static_n = None
        from graphc.framework.static_value import constant_value
        value = constant_value(n)
        if value is not None and op_type == "QueueDequeueManyV2":
            static_n = int(value)
        for t, shape in zip(op.outputs, self._shapes):
            t.set_shape(TensorShape([static_n]).concatenate(shape))
        return self._packed(op.outputs)

    def dequeue_many(self, n, name=None):
        return self._dequeue_n("QueueDequeueManyV2", n, name or "dequeue_many")

    def dequeue_up_to(self, n, name=None):
        return self._dequeue_n("QueueDequeueUpToV2", n, name or "dequeue_up_to")

    def close(self, cancel_pending_enqueues=False, name=None):
        return self._graph.create_op("QueueCloseV2", [self._handle],
                                     {"cancel_pending_enqueues": bool(cancel_pending_enqueues)},
                                     name or "close")

    def size(self, name=None):
        return self._graph.create_op("QueueSizeV2", [self._handle], {},
                                     name or "size").outputs[0]

    def is_closed(self, name=None):
        return self._graph.create_op("QueueIsClosedV2", [self._handle], {},
                                     name or "is_closed").outputs[0]


class FIFOQueue(QueueBase):
    """Elements come out in the order they went in."""

    def __init__(self, capacity, dtypes, shapes=None, names=None, shared_name=None,
                 name="fifo_queue"):
        super().__init__("FIFOQueueV2", capacity, dtypes, shapes, names, name, {})


class PaddingFIFOQueue(QueueBase):
    """A FIFOQueue whose component shapes may have unknown dimensions (None): dequeue_many
    and dequeue_up_to pad each component to the largest element of the batch."""

    def __init__(self, capacity, dtypes, shapes, names=None, shared_name=None,
                 name="padding_fifo_queue"):
        n_types = len(dtypes) if isinstance(dtypes, (list, tuple)) else 1
        if shapes is None or len(_shape_list(shapes)) != n_types:
            raise ValueError(f"PaddingFIFOQueue: shapes must be provided for all components, "
                             f"but received {n_types} dtypes and "
                             f"{0 if shapes is None else len(_shape_list(shapes))} shapes.")
        if any(s.ndims is None for s in _shape_list(shapes)):
            raise ValueError("PaddingFIFOQueue: every component shape needs a known rank "
                             "(its dimensions may be None)")
        super().__init__("PaddingFIFOQueueV2", capacity, dtypes, shapes, names, name, {})


class RandomShuffleQueue(QueueBase):
    """Elements come out in random order; a dequeue waits (until the queue closes) for more
    than min_after_dequeue to remain, so the mix stays large."""

    def __init__(self, capacity, min_after_dequeue, dtypes, shapes=None, names=None,
                 seed=None, shared_name=None, name="random_shuffle_queue"):
        if min_after_dequeue >= capacity:
            raise ValueError(f"min_after_dequeue ({min_after_dequeue}) must be less than "
                             f"capacity ({capacity})")
        from graphc.ops.random_ops import get_seed
        seed1, seed2 = get_seed(seed)
        super().__init__("RandomShuffleQueueV2", capacity, dtypes, shapes, names, name,
                         {"min_after_dequeue": int(min_after_dequeue), "seed": seed1,
                          "seed2": seed2})
