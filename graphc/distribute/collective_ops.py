"""Collective ops: allreduce, allgather and broadcast over the ranks of graphc.distribute.

They are ordinary graph ops (graphc-dump shows them), declared host-only: the compiled
backends cut a run signature into stages around them (compiled_executor._plan_stages), so
a training step is the native stage computing the gradients, the host stage running the
collectives, then the native stage applying the updates; except on the CPU in a job of
several ranks, where Allreduce and Broadcast of static dims are calls from the compiled
code into MPI and a step is one native call (native.py). A collective's kernel hands MPI
the arrays the native stage wrote its fetches into and an output array the next native
stage reads as a feed, so no byte is copied on the host besides what MPI moves itself.
The reference executor and gpu_emulated run the same kernels.

Every rank must run the same collectives in the same order, on the same shapes:
schedule.py checks it (a header exchange where a rank's collectives depart from the
sequence the ranks last agreed on, not at every call) and bounds every wait
(GRAPHC_MPI_TIMEOUT).
"""
import sys
import weakref

import numpy as np

from graphc import dtypes, errors
from graphc.distribute import world as world_module
from graphc.distribute.native import NATIVE
from graphc.distribute.schedule import hash64
from graphc.framework.graph import create_op
from graphc.framework.indexed_slices import IndexedSlices
from graphc.framework.op_def import register_gradient, register_op
from graphc.framework.tensor_shape import TensorShape
from graphc.ops.constant_ops import convert_to_tensor

Average = "average"
Sum = "sum"
REDUCTIONS = (Average, Sum)
_SUPPORTED = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64)


# ------------------------------------------------------------------ op definitions
def _check_input(op_type, x, min_rank=0):
    if x.dtype not in _SUPPORTED:
        raise TypeError(f"{op_type} takes {', '.join(d.name for d in _SUPPORTED)} tensors, "
                        f"got {x.dtype.name} ({x.name})")
    if x.shape.ndims is not None and x.shape.ndims < min_rank:
        raise ValueError(f"{op_type} needs a tensor of rank >= {min_rank}, got {x.name} of "
                         f"shape {x.shape}")


def _allreduce_infer(inputs, a):
    x, = inputs
    _check_input("MpiAllreduce", x)
    if a["reduction"] not in REDUCTIONS:
        raise ValueError(f"MpiAllreduce: reduction must be one of {REDUCTIONS}, got "
                         f"{a['reduction']!r}")
    if a["reduction"] == Average and not x.dtype.is_floating:
        raise TypeError(f"MpiAllreduce: an average of {x.dtype.name} tensors ({x.name}) "
                        "would be truncated; use op=Sum")
    return x.shape, x.dtype


def _allgather_infer(inputs, a):
    x, = inputs
    _check_input("MpiAllgather", x, min_rank=1)
    if x.shape.ndims is None:
        return TensorShape(None), x.dtype
    return TensorShape([None] + x.shape.as_list()[1:]), x.dtype


def _broadcast_infer(inputs, a):
    x, = inputs
    _check_input("MpiBroadcast", x)
    if not isinstance(a["root_rank"], int) or a["root_rank"] < 0:
        raise ValueError(f"MpiBroadcast: root_rank must be a rank number >= 0, got "
                         f"{a['root_rank']!r}")
    return x.shape, x.dtype


def _allreduce_kernel(state, op, x):
    w = _world_for(op)
    x = np.asarray(x, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
    record = _record(op)
    out = record.output_like(x)
    if w.size == 1:
        np.copyto(out, x)
        return out
    watchdog = _agreed(w.agreement, op, record.identity, x.shape)
    watchdog.watch(op)
    try:
        w.comm.Allreduce(x, out, op=w.mpi.SUM)
    finally:
        watchdog.done()
    if op.attrs["reduction"] == Average:
        np.divide(out, w.size, out=out)
    return out


def _allgather_kernel(state, op, x):
    w = _world_for(op)
    x = np.asarray(x, order="C")
    if w.size == 1:
        return x.copy()
    # its output size is the sum of the ranks' first dims: exchanged at every call, with
    # the header that checks the rest (so an allgather is never part of the sequence)
    dims0 = w.agreement.exchange(op, _record(op).identity, x.shape[1:], x.shape[0])
    out = np.empty((int(dims0.sum()),) + x.shape[1:], x.dtype)
    counts = dims0 * int(np.prod(x.shape[1:], dtype=np.int64))  # elements per rank
    w.agreement.watchdog.watch(op)
    try:
        w.comm.Allgatherv(x, [out, counts])
    finally:
        w.agreement.watchdog.done()
    return out


def _broadcast_kernel(state, op, x):
    w = _world_for(op)
    root = op.attrs["root_rank"]
    if root >= w.size:
        raise errors.InvalidArgumentError(
            None, op, f"MpiBroadcast: root_rank {root} is not a rank of this job of "
                      f"{w.size} processes\n\t [[node {op.describe()}]]")
    out = np.array(x, order="C")  # the root's value leaves from here, the others' arrive
    if w.size > 1:
        watchdog = _agreed(w.agreement, op, _record(op).identity, out.shape)
        watchdog.watch(op)
        try:
            w.comm.Bcast(out, root=root)
        finally:
            watchdog.done()
    return out


class OpRecord:
    """What the calls of one collective op keep, made at its first call (and dropped with
    the op): the hash of what the op is (which the ranks compare; the text of its attrs
    costs more than a small allreduce) and its last output array, reused when nothing
    else holds it any more: a new array of many MiB costs a page fault per 4 KiB on its
    first write, 15-20% of the Allreduce itself. An array still referenced anywhere
    (fetched by the user, kept in an executor's values) is left alone, and a new one is
    made."""

    __slots__ = ("identity", "out")

    def __init__(self, op):
        self.identity = hash64(
            f"{op.type}|{op.name}|{op.outputs[0].dtype.name}|{sorted(op.attrs.items())}")
        self.out = None

    def output_like(self, x):
        out = self.out
        if out is None or out.shape != x.shape or out.dtype != x.dtype or \
                sys.getrefcount(out) > _UNSHARED:
            out = self.out = np.empty_like(x)
        return out


def _count_of_unshared():
    """What sys.getrefcount says, in output_like, of an array only its record holds
    (measured here on this interpreter, which may count references of locals otherwise)."""
    record = OpRecord.__new__(OpRecord)
    record.out = np.empty(0)
    out = record.out
    return sys.getrefcount(out)


_UNSHARED = _count_of_unshared()
# id(op) -> its OpRecord: a plain dict, a third of a WeakKeyDictionary's lookup cost on
# every call; the op's finalizer removes its entry before its id can be reused
_records = {}


def _record(op):
    record = _records.get(id(op))
    if record is None:
        record = _records[id(op)] = OpRecord(op)
        weakref.finalize(op, _records.pop, id(op), None)
    return record


def op_identity(op):
    """The hash of what `op` is, which the ranks compare."""
    return _record(op).identity


# host_only: the stage planner runs them on the host between native stages (MPI calls,
# and Allgather's output size is known only once the ranks' first dims are), but for
# the CPU's code in a job of several ranks, which calls MPI itself (native.py).
_COLLECTIVE = dict(stateful=True, uses_context=True,  # stateful: never folded nor merged
                   kind="opaque", host_only=True)
for _type, _infer, _kernel, _native in (
        ("MpiAllreduce", _allreduce_infer, _allreduce_kernel, NATIVE),
        ("MpiAllgather", _allgather_infer, _allgather_kernel, None),
        ("MpiBroadcast", _broadcast_infer, _broadcast_kernel, NATIVE)):
    register_op(_type, infer=_infer, kernel=_kernel, native_on_cpu=_native, **_COLLECTIVE)


@register_gradient("MpiAllreduce")
def _allreduce_grad(op, grad):
    """Each rank's input reaches every rank's output, so its gradient is the same
    reduction of the output gradients of all ranks (Horovod's rule)."""
    return [_allreduce_op(grad, op.attrs["reduction"])]


@register_gradient("MpiAllgather")
def _allgather_grad(op, grad):
    """This rank's rows of the sum over ranks of the output gradients."""
    from graphc.ops import array_ops, reduction_ops
    x = op.inputs[0]
    summed = _allreduce_op(grad, Sum)
    dims0 = create_op("MpiAllgather", [array_ops.shape(x)[:1]], {}, "AllgatherDims").outputs[0]
    begin = reduction_ops.reduce_sum(dims0[:world_module.world("MpiAllgather's gradient").rank])
    return [array_ops.slice(summed, array_ops.concat(
        [array_ops.reshape(begin, [1]), array_ops.zeros_like(array_ops.shape(x)[1:])], 0),
        array_ops.shape(x))]


@register_gradient("MpiBroadcast")
def _broadcast_grad(op, grad):
    """The root's value reaches every rank: its gradient is the sum of the output
    gradients of all ranks; the other ranks' inputs are not used (zero gradient)."""
    from graphc.ops import array_ops
    summed = _allreduce_op(grad, Sum)
    if world_module.world("MpiBroadcast's gradient").rank == op.attrs["root_rank"]:
        return [summed]
    return [array_ops.zeros_like(summed)]


# ------------------------------------------------------------------- public builders
def _allreduce_op(tensor, reduction, name=None):
    return create_op("MpiAllreduce", [tensor], {"reduction": reduction},
                     name or "MpiAllreduce").outputs[0]


def allreduce(tensor, op=Average, name=None):
    """The sum (op=Sum) or the mean (op=Average) of `tensor` over all ranks, on every rank.
    An IndexedSlices (a sparse gradient) is gathered instead, as Horovod does: the values
    and indices of all ranks concatenated (values divided by size() for Average), which
    the optimizers' sparse updates add up."""
    if op not in REDUCTIONS:
        raise ValueError(f"allreduce: op must be graphc.distribute.Average or .Sum, got {op!r}")
    if isinstance(tensor, IndexedSlices):
        values = allgather(tensor.values, name=(name or "Allreduce") + "_values")
        if op == Average:
            size = world_module.world("allreduce of an IndexedSlices").size
            values = values / np.asarray(size, tensor.values.dtype.np)
        indices = allgather(tensor.indices, name=(name or "Allreduce") + "_indices")
        return IndexedSlices(values, indices, tensor.dense_shape)
    return _allreduce_op(convert_to_tensor(tensor), op, name)


def allgather(tensor, name=None):
    """The tensors of all ranks concatenated along dim 0, in rank order; their first
    dims may differ, the other dims must agree."""
    return create_op("MpiAllgather", [convert_to_tensor(tensor)], {},
                     name or "MpiAllgather").outputs[0]


def broadcast(tensor, root_rank, name=None):
    """`tensor`'s value on rank `root_rank`, on every rank."""
    return create_op("MpiBroadcast", [convert_to_tensor(tensor)],
                     {"root_rank": _int(root_rank, "root_rank")},
                     name or "MpiBroadcast").outputs[0]


def _int(value, what):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {value!r}")
    return int(value)


# ---------------------------------------------------------------- schedule agreement
def _world_for(op):
    w = world_module.current()
    return w if w is not None else _no_world(op)


def _no_world(op):
    try:
        return world_module.world(f"{op.type} '{op.name}'")
    except ValueError as e:
        raise errors.FailedPreconditionError(None, op, f"{e}\n\t [[node {op.describe()}]]") \
            from None


def _agreed(agreement, op, identity, shape):
    """Makes sure every rank runs `op` on `shape` now (schedule.Agreement); returns the
    watchdog to watch the data's move with."""
    key = (identity, shape)
    if not agreement.follows(key):
        agreement.depart(op, key, shape)
    return agreement.watchdog
