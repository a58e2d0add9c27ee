"""Collective ops: allreduce, allgather and broadcast over the ranks of graphc.distribute.

They are ordinary graph ops (graphc-dump shows them), declared host-only: the compiled
backends cut a run signature into stages around them (compiled_executor._plan_stages), so
a training step is the native stage computing the gradients, the host stage running the
collectives, then the native stage applying the updates. A collective's kernel hands MPI
the arrays the native stage wrote its fetches into and an output array the next native
stage reads as a feed, so no byte is copied on the host besides what MPI moves itself.
The reference executor and gpu_emulated run the same kernels.

Every rank must run the same collectives in the same order. Before its data moves, each
collective exchanges a 24-byte header (a hash of its type, name, dtype and attrs; a hash
of its shape; its first dim) with every rank: a rank running a different graph, another
op, or another shape makes every rank raise FailedPreconditionError naming what each rank
runs, instead of deadlocking or reducing mismatched buffers. The exchange is
non-blocking and polled: a rank that never arrives (it left its loop early, it hangs)
makes the others warn after a minute and fail after COLLECTIVE_TIMEOUT seconds
(GRAPHC_MPI_TIMEOUT, default 600).
"""
import os
import sys
import time
import weakref
import zlib

import numpy as np

from graphc import dtypes, errors
from graphc.distribute import world as world_module
from graphc.framework.graph import create_op
from graphc.framework.indexed_slices import IndexedSlices
from graphc.framework.op_def import register_gradient, register_op
from graphc.framework.tensor_shape import TensorShape
from graphc.ops.constant_ops import convert_to_tensor

Average = "average"
Sum = "sum"
REDUCTIONS = (Average, Sum)
# A rank may legitimately keep the others waiting a while (rank 0 evaluating or writing a
# checkpoint): a warning after STALL_WARNING seconds, an error after COLLECTIVE_TIMEOUT.
COLLECTIVE_TIMEOUT = float(os.environ.get("GRAPHC_MPI_TIMEOUT", "600"))
STALL_WARNING = float(os.environ.get("GRAPHC_MPI_STALL_WARNING", "60"))
_DESCRIPTION_BYTES = 240  # of a rank's description of its collective, in a mismatch report
_SUPPORTED = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64)
# Poll without sleeping this long: partners usually arrive by then, and a sleep would add
# its wake-up latency to the step; after it, sleep between polls (the wait is long anyway,
# and the cores may be the other ranks' own).
_SPIN_SECONDS = 0.05


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
    out = _outputs.like(op, x)
    if w.size == 1:
        np.copyto(out, x)
        return out
    _agree(w, op, x)
    w.comm.Allreduce(x, out, op=w.mpi.SUM)
    if op.attrs["reduction"] == Average:
        np.divide(out, w.size, out=out)
    return out


def _allgather_kernel(state, op, x):
    w = _world_for(op)
    x = np.asarray(x, order="C")
    if w.size == 1:
        return x.copy()
    dims0 = _agree(w, op, x)
    out = np.empty((int(dims0.sum()),) + x.shape[1:], x.dtype)
    counts = dims0 * int(np.prod(x.shape[1:], dtype=np.int64))  # elements per rank
    w.comm.Allgatherv(x, [out, counts])
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
        _agree(w, op, out)
        w.comm.Bcast(out, root=root)
    return out


class OutputBuffers:
    """Each allreduce's output array of its last run, reused when nothing else holds it
    any more: a new array of many MiB costs a page fault per 4 KiB on its first write,
    15-20% of the Allreduce itself. An array still referenced anywhere (fetched by the
    user, kept in an executor's values) is left alone, and a new one is made."""

    def __init__(self):
        self._arrays = weakref.WeakKeyDictionary()  # op -> its last output
        self._unshared = self._count_of_unshared()

    def like(self, op, x):
        out = self._arrays.get(op)
        if out is None or out.shape != x.shape or out.dtype != x.dtype or \
                sys.getrefcount(out) > self._unshared:
            out = self._arrays[op] = np.empty_like(x)
        return out

    def _count_of_unshared(self):
        """What sys.getrefcount says, in like(), of an array only the dict holds (measured
        here on this interpreter, which may count references of locals differently)."""
        key = type("Probe", (), {})()
        self._arrays[key] = np.empty(0)
        out = self._arrays.get(key)
        count = sys.getrefcount(out)
        del self._arrays[key]
        return count


_outputs = OutputBuffers()


# host_only: the stage planner runs them on the host between native stages (MPI calls,
# and Allgather's output size is known only once the ranks' first dims are).
_COLLECTIVE = dict(stateful=True, uses_context=True,  # stateful: never folded nor merged
                   kind="opaque", host_only=True)
for _type, _infer, _kernel in (("MpiAllreduce", _allreduce_infer, _allreduce_kernel),
                               ("MpiAllgather", _allgather_infer, _allgather_kernel),
                               ("MpiBroadcast", _broadcast_infer, _broadcast_kernel)):
    register_op(_type, infer=_infer, kernel=_kernel, **_COLLECTIVE)


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
    try:
        return world_module.world(f"{op.type} '{op.name}'")
    except ValueError as e:
        raise errors.FailedPreconditionError(None, op, f"{e}\n\t [[node {op.describe()}]]") \
            from None


def _header(op, x):
    """(what the op is, its shape apart from dim 0, dim 0) as int64s: what every rank
    must agree on before data moves (Allgather's dims 0 may differ: they are its counts)."""
    what = _identities.get(op)
    if what is None:  # once per op: the text of its attrs costs more than the exchange
        text = f"{op.type}|{op.name}|{op.outputs[0].dtype.name}|{sorted(op.attrs.items())}"
        what = _identities[op] = zlib.crc32(text.encode())
    rest = x.shape[1:] if op.type == "MpiAllgather" else x.shape
    dim0 = x.shape[0] if x.ndim else 0
    return np.array([what, zlib.crc32(repr(rest).encode()), dim0], np.int64)


_identities = weakref.WeakKeyDictionary()  # op -> the hash of what it is


def _agree(w, op, x):
    """Exchanges headers; returns every rank's dim 0. Raises on every rank when they
    disagree, and on a rank whose partners do not arrive within COLLECTIVE_TIMEOUT."""
    mine = _header(op, x)
    headers = np.empty((w.size, mine.size), np.int64)
    _wait(w.comm.Iallgather(mine, headers), op, w)
    same = headers[:, :2] == headers[0, :2]
    if op.type != "MpiAllgather":
        same = np.column_stack([same, headers[:, 2] == headers[0, 2]])
    if not same.all():
        raise errors.FailedPreconditionError(None, op, _mismatch_report(w, op, x))
    return headers[:, 2]


def _wait(request, op, w):
    start = time.monotonic()
    warned = False
    while not request.Test():
        waited = time.monotonic() - start
        if waited > STALL_WARNING and not warned and COLLECTIVE_TIMEOUT > STALL_WARNING:
            warned = True
            sys.stderr.write(f"graphc.distribute: rank {w.rank} has waited {STALL_WARNING:g} s "
                             f"for the other ranks at collective {op.type} '{op.name}'; it "
                             f"fails after {COLLECTIVE_TIMEOUT:g} s (GRAPHC_MPI_TIMEOUT)\n")
            sys.stderr.flush()
        if waited > COLLECTIVE_TIMEOUT:
            raise errors.FailedPreconditionError(
                None, op, f"rank {w.rank}: the other ranks did not reach collective "
                          f"{op.type} '{op.name}' within {COLLECTIVE_TIMEOUT:g} s "
                          "(GRAPHC_MPI_TIMEOUT): a rank stopped or runs other steps\n\t "
                          f"[[node {op.describe()}]]")
        if waited > _SPIN_SECONDS:
            time.sleep(1e-3)


def _mismatch_report(w, op, x):
    """What each rank runs, gathered as fixed-size text (every rank is here: the header
    exchange completed)."""
    mine = f"{op.type} '{op.name}' {x.dtype.name}{list(x.shape)} {dict(op.attrs)}"
    buf = np.zeros(_DESCRIPTION_BYTES, np.uint8)
    raw = mine.encode()[:_DESCRIPTION_BYTES]
    buf[:len(raw)] = np.frombuffer(raw, np.uint8)
    every = np.empty((w.size, _DESCRIPTION_BYTES), np.uint8)
    w.comm.Allgather(buf, every)
    lines = [f"  rank {r}: " + bytes(row).rstrip(b"\0").decode(errors="replace")
             for r, row in enumerate(every)]
    return ("the ranks run different collectives at the same point of their schedules "
            "(different graphs, fetches or shapes on different ranks):\n" + "\n".join(lines)
            + f"\n\t [[node {op.describe()}]]")
