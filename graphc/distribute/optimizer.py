"""DistributedOptimizer: any graphc optimizer whose gradients are averaged over the ranks.

Tensor fusion (Horovod's): the dense gradients are packed, in the order of the variable
list, into fusion buffers of at most `fusion_threshold_bytes` per dtype, and each buffer
is one MpiAllreduce, so a step makes a few large collectives instead of one per variable.
The packing is graph ops (a reshape to 1-D of each gradient, one concat): the native
stage computing the gradients writes them straight into the buffer that MPI then
reduces, and the update stage reads its slices of the reduced buffer, so neither side
adds a copy on the host. The order of the collectives is the order of their creation,
hence the same on every rank that builds the same graph (collective_ops checks it).
"""
import numpy as np

from graphc.distribute.collective_ops import REDUCTIONS, Average, Sum, allreduce
from graphc.distribute.world import world
from graphc.framework.indexed_slices import IndexedSlices
from graphc.ops import array_ops
from graphc.ops.constant_ops import convert_to_tensor
from graphc.train.optimizer import Optimizer

FUSION_THRESHOLD_BYTES = 64 * 1024 * 1024  # Horovod's default HOROVOD_FUSION_THRESHOLD


class DistributedOptimizer(Optimizer):
    """Wraps `optimizer`: compute_gradients returns its gradients reduced over all ranks
    (op=Average: their mean; Sum: their sum), apply_gradients is the wrapped optimizer's.
    IndexedSlices gradients are gathered (values and indices of every rank), or reduced
    as dense tensors with sparse_as_dense=True."""

    def __init__(self, optimizer, name=None, use_locking=False, op=Average,
                 fusion_threshold_bytes=FUSION_THRESHOLD_BYTES, sparse_as_dense=False):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"DistributedOptimizer wraps a graphc optimizer, got {optimizer!r}")
        if op not in REDUCTIONS:
            raise ValueError(f"DistributedOptimizer: op must be graphc.distribute.Average or "
                             f".Sum, got {op!r}")
        super().__init__(use_locking, name or f"Distributed{type(optimizer).__name__}")
        self._optimizer = optimizer
        self._op = op
        self._fusion_threshold_bytes = int(fusion_threshold_bytes)
        self._sparse_as_dense = sparse_as_dense

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's gradients reduced over the ranks; in a job of one
        process, its gradients as they are (as Horovod: no collective would change them,
        and packing them would cost a copy per step)."""
        grads_and_vars = self._optimizer.compute_gradients(*args, **kwargs)
        if world("DistributedOptimizer").size == 1:
            return grads_and_vars
        grads = [g for g, _ in grads_and_vars]
        if self._sparse_as_dense:
            grads = [convert_to_tensor(g) if isinstance(g, IndexedSlices) else g
                     for g in grads]
        with grads_and_vars[0][1].graph.name_scope(self._name + "_Allreduce"):
            reduced = reduce_gradients(grads, self._op, self._fusion_threshold_bytes)
        return list(zip(reduced, [v for _, v in grads_and_vars]))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step, name)

    def get_slot(self, var, name):
        return self._optimizer.get_slot(var, name)

    def get_slot_names(self):
        return self._optimizer.get_slot_names()

    def variables(self):
        return self._optimizer.variables()


def reduce_gradients(grads, op=Average, fusion_threshold_bytes=FUSION_THRESHOLD_BYTES):
    """`grads` (None, Tensors, IndexedSlices) reduced over the ranks, in the same order;
    dense ones through fusion buffers."""
    reduced = list(grads)
    for bucket in fusion_buckets(grads, fusion_threshold_bytes):
        for i, r in zip(bucket, _reduce_bucket([grads[i] for i in bucket], op)):
            reduced[i] = r
    for i, g in enumerate(grads):
        if isinstance(g, IndexedSlices):
            reduced[i] = allreduce(g, op)
    return reduced


def fusion_buckets(grads, threshold_bytes):
    """Lists of positions of the dense gradients, each list one fusion buffer: per dtype in
    order of first appearance, consecutive gradients while the buffer stays within
    `threshold_bytes`. A gradient of unknown size, or larger than the threshold, is a
    buffer of its own (it ends the buffer being filled)."""
    by_dtype = {}
    for i, g in enumerate(grads):
        if g is not None and not isinstance(g, IndexedSlices):
            by_dtype.setdefault(g.dtype, []).append(i)
    buckets = []
    for positions in by_dtype.values():
        current, current_bytes = [], 0
        for i in positions:
            size = _nbytes(grads[i])
            alone = size is None or size > threshold_bytes
            if current and (alone or current_bytes + size > threshold_bytes):
                buckets.append(current)
                current, current_bytes = [], 0
            if alone:
                buckets.append([i])
            else:
                current.append(i)
                current_bytes += size
        if current:
            buckets.append(current)
    return buckets


def _nbytes(t):
    if not t.shape.is_fully_defined():
        return None
    return t.shape.num_elements() * t.dtype.size


def _reduce_bucket(grads, op):
    """One allreduce of the gradients packed into one 1-D buffer, unpacked again. An
    average of floats is the allreduce's sum divided by the number of ranks in graph ops
    after the unpacking: the division becomes part of the update stage's compiled kernels
    instead of one more pass over the whole buffer on the host (5-10% of a 64 MiB
    allreduce here)."""
    average = op == Average and grads[0].dtype.is_floating
    reduction = Sum if average else op
    if len(grads) == 1:
        reduced = [allreduce(grads[0], reduction)]
    else:
        sizes = [g.shape.num_elements() for g in grads]
        packed = array_ops.concat([array_ops.reshape(g, [-1]) for g in grads], 0,
                                  name="FusionBuffer")
        summed = allreduce(packed, reduction, name="FusedAllreduce")
        pieces = array_ops.split(summed, sizes, 0, name="Unfuse")
        reduced = [array_ops.reshape(p, g.shape.as_list()) for p, g in zip(pieces, grads)]
    if not average:
        return reduced
    size = world("DistributedOptimizer's average").size
    return [r / np.asarray(size, r.dtype.np) for r in reduced]
