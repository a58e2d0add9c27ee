"""tf.train.batch, batch_join, shuffle_batch, the input producers and limit_epochs: queue
pipelines
as TF1 builds them (a queue, its enqueue op run by a QueueRunner in num_threads threads, and a
dequeue_many of batch_size), so they need start_queue_runners or a MonitoredSession."""
from graphc import dtypes
from graphc.framework.graph import GraphKeys, Tensor, control_dependencies, name_scope
from graphc.framework.tensor_shape import TensorShape
from graphc.ops import array_ops, random_ops
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.control_flow_ops import Assert, identity
from graphc.ops.io_ops import matching_files
from graphc.ops.queue_ops import FIFOQueue, PaddingFIFOQueue, RandomShuffleQueue
from graphc.ops.topk_ops import top_k
from graphc.train.queue_runner import QueueRunner, add_queue_runner

__all__ = ["batch", "batch_join", "shuffle_batch", "slice_input_producer",
           "range_input_producer", "limit_epochs", "input_producer", "string_input_producer",
           "match_filenames_once"]


def _as_list(tensors):
    """(list of tensors, names or None) of a list, tuple, dict or single tensor."""
    if isinstance(tensors, dict):
        names = sorted(tensors)
        return [convert_to_tensor(tensors[n]) for n in names], names
    if isinstance(tensors, (list, tuple)):
        return [convert_to_tensor(t) for t in tensors], None
    return [convert_to_tensor(tensors)], None


def _element_shapes(tensors, shapes, enqueue_many, dynamic_pad=False):
    """The queue's element shapes: given, or the tensors' (without the batch dimension
    when enqueue_many). dynamic_pad allows unknown dimensions (padded per batch), not an
    unknown rank."""
    if shapes is not None:
        return [TensorShape(s) for s in shapes]
    out = []
    for t in tensors:
        shape = t.shape[1:] if enqueue_many and t.shape.ndims else t.shape
        if dynamic_pad and shape.ndims is None:
            raise ValueError(f"dynamic_pad: the rank of {t.name} must be known to pad it")
        if not dynamic_pad and not shape.is_fully_defined():
            raise ValueError(f"All shapes must be fully defined: the element shape of "
                             f"{t.name} is {shape}; pass shapes= (or dynamic_pad=True)")
        out.append(shape)
    return out


def _batching_queue(tensors, shapes, enqueue_many, capacity, dynamic_pad):
    """batch's queue: a PaddingFIFOQueue when dynamic_pad, else a FIFOQueue."""
    dtypes_ = [t.dtype for t in tensors]
    element_shapes = _element_shapes(tensors, shapes, enqueue_many, dynamic_pad)
    if dynamic_pad:
        return PaddingFIFOQueue(capacity, dtypes_, element_shapes)
    return FIFOQueue(capacity, dtypes_, element_shapes)


def _packed(outputs, names, single):
    if names is not None:
        return dict(zip(names, outputs))
    if single:
        return outputs[0]
    return outputs if isinstance(outputs, list) else list(outputs)


def _enqueue(queue, tensors, enqueue_many):
    return queue.enqueue_many(tensors) if enqueue_many else queue.enqueue(tensors)


def _pipeline(queue, enqueue_ops, names, single, batch_size, allow_smaller_final_batch):
    """A QueueRunner running enqueue_ops (one thread each) and the batch dequeued."""
    add_queue_runner(QueueRunner(queue, enqueue_ops))
    out = (queue.dequeue_up_to(batch_size) if allow_smaller_final_batch
           else queue.dequeue_many(batch_size))
    outputs = [out[n] for n in names] if isinstance(out, dict) else (
        [out] if isinstance(out, Tensor) else list(out))
    return _packed(outputs, names, single)


def batch(tensors, batch_size, num_threads=1, capacity=32, enqueue_many=False, shapes=None,
          dynamic_pad=False, allow_smaller_final_batch=False, shared_name=None, name=None):
    """Batches of batch_size elements in the order the runner threads enqueue them;
    with dynamic_pad, each batch padded (zeros) to its longest element per dimension."""
    with name_scope(name, "batch", list(_as_list(tensors)[0])):
        ts, names = _as_list(tensors)
        queue = _batching_queue(ts, shapes, enqueue_many, capacity, dynamic_pad)
        return _pipeline(queue, [_enqueue(queue, ts, enqueue_many)] * num_threads, names,
                         isinstance(tensors, Tensor), batch_size, allow_smaller_final_batch)


def batch_join(tensors_list, batch_size, capacity=32, enqueue_many=False, shapes=None,
               dynamic_pad=False, allow_smaller_final_batch=False, shared_name=None,
               name=None):
    """batch() of several sources of the same structure and dtypes (e.g. one reader per
    file), each enqueued by its own runner thread; batches mix them in arrival order."""
    if not tensors_list:
        raise ValueError("batch_join: expected at least one list of tensors in tensors_list")
    with name_scope(name, "batch_join", [t for tl in tensors_list
                                         for t in _as_list(tl)[0]]):
        sources = [_as_list(tensors) for tensors in tensors_list]
        ts, names = sources[0]
        for other, other_names in sources[1:]:
            if other_names != names or [t.dtype for t in other] != [t.dtype for t in ts]:
                raise ValueError("batch_join: every entry of tensors_list must have the same "
                                 "structure and dtypes")
        queue = _batching_queue(ts, shapes, enqueue_many, capacity, dynamic_pad)
        enqueue_ops = [_enqueue(queue, source, enqueue_many) for source, _ in sources]
        return _pipeline(queue, enqueue_ops, names, isinstance(tensors_list[0], Tensor),
                         batch_size, allow_smaller_final_batch)


def shuffle_batch(tensors, batch_size, capacity, min_after_dequeue, num_threads=1, seed=None,
                  enqueue_many=False, shapes=None, allow_smaller_final_batch=False,
                  shared_name=None, name=None):
    """Batches drawn at random from a queue kept above min_after_dequeue elements."""
    with name_scope(name, "shuffle_batch", list(_as_list(tensors)[0])):
        ts, names = _as_list(tensors)
        queue = RandomShuffleQueue(capacity, min_after_dequeue, [t.dtype for t in ts],
                                   _element_shapes(ts, shapes, enqueue_many), seed=seed)
        return _pipeline(queue, [_enqueue(queue, ts, enqueue_many)] * num_threads, names,
                         isinstance(tensors, Tensor), batch_size, allow_smaller_final_batch)


def limit_epochs(tensor, num_epochs=None, name=None):
    """tensor, num_epochs times: then OutOfRangeError. The count is a local variable
    "epochs" (run local_variables_initializer, as in TF1)."""
    if num_epochs is None:
        return tensor
    if num_epochs <= 0:
        raise ValueError(f"num_epochs must be > 0 not {num_epochs}.")
    from graphc.variables import Variable
    with name_scope(name, "limit_epochs", [tensor]) as scope:
        counter = Variable(array_ops.zeros([], dtypes.int64), name="epochs", trainable=False,
                           collections=[GraphKeys.LOCAL_VARIABLES])
        with control_dependencies([counter.count_up_to(num_epochs)]):
            return identity(tensor, name=scope)


def input_producer(input_tensor, element_shape=None, num_epochs=None, shuffle=True,
                   seed=None, capacity=32, shared_name=None, summary_name=None, name=None,
                   cancel_op=None):
    """A queue of the rows of input_tensor, over and over (each pass in a new random
    order if `shuffle`), or num_epochs times before the queue closes, filled by a
    QueueRunner; with summary_name, a scalar summary of how full the queue is."""
    with name_scope(name, "input_producer", [input_tensor]):
        rows = convert_to_tensor(input_tensor, name="input_tensor")
        if rows.shape.ndims == 0:
            raise ValueError("input_producer: input_tensor must have rank >= 1 (its rows "
                             "are the queue's elements)")
        queue = _producer_queue(rows, element_shape, num_epochs, shuffle, seed, capacity,
                                cancel_op)
        if summary_name is not None:
            from graphc.ops.math_ops import cast, multiply
            from graphc.summary import scalar
            scalar(summary_name, multiply(cast(queue.size(), "float32"), 1.0 / capacity))
        return queue


def range_input_producer(limit, num_epochs=None, shuffle=True, seed=None, capacity=32,
                         shared_name=None, name=None):
    """A queue of the integers 0 .. limit-1, over and over (each pass shuffled if
    `shuffle`), or num_epochs times before the queue closes, filled by a QueueRunner."""
    with name_scope(name, "input_producer", [limit]) as scope:
        return input_producer(array_ops.range(limit), [], num_epochs, shuffle, seed,
                              capacity, name=scope)


def slice_input_producer(tensor_list, num_epochs=None, shuffle=True, seed=None, capacity=32,
                         shared_name=None, name=None):
    """One slice (along the first dim) of each tensor per dequeue, the same index for
    all, the indices repeating (shuffled each pass if `shuffle`) forever or num_epochs
    times, after which the dequeue raises OutOfRangeError."""
    with name_scope(name, "input_producer", tensor_list):
        tensors = [convert_to_tensor(t) for t in tensor_list]
        if not tensors:
            raise ValueError("Expected at least one tensor in slice_input_producer().")
        size = array_ops.shape(tensors[0])[0]
        index = range_input_producer(size, num_epochs, shuffle, seed, capacity).dequeue()
        return [array_ops.gather(t, index) for t in tensors]


def _producer_queue(rows, element_shape, num_epochs, shuffle, seed, capacity, cancel_op=None):
    element_shape = rows.shape[1:].merge_with(
        element_shape if element_shape is not None else rows.shape[1:])
    if not element_shape.is_fully_defined():
        raise ValueError("Either `input_tensor` must have a fully defined shape or "
                         "`element_shape` must be specified")
    if shuffle:
        # a uniformly random permutation each pass: the order of random keys
        keys = random_ops.random_uniform(array_ops.shape(rows)[:1], seed=seed)
        rows = array_ops.gather(rows, top_k(keys, k=array_ops.size(keys))[1])
    rows = limit_epochs(rows, num_epochs)
    queue = FIFOQueue(capacity, [rows.dtype.base_dtype], [element_shape])
    add_queue_runner(QueueRunner(queue, [queue.enqueue_many([rows])], cancel_op=cancel_op))
    return queue


def string_input_producer(string_tensor, num_epochs=None, shuffle=True, seed=None,
                          capacity=32, shared_name=None, name=None, cancel_op=None):
    """A queue of the strings of string_tensor (file names, for a reader), each pass
    shuffled if `shuffle`, num_epochs passes (None: forever); an empty string_tensor is an
    InvalidArgumentError when the queue runner first runs."""
    with name_scope(name, "input_producer", [string_tensor]):
        strings = convert_to_tensor(string_tensor, dtype=dtypes.string, name="string_tensor")
        if strings.shape.ndims not in (None, 1):
            raise ValueError(f"string_input_producer takes a vector of strings, got shape "
                             f"{strings.shape}")
        not_empty = Assert(array_ops.size(strings) > 0,
                           ["string_input_producer requires a non-null input tensor"])
        with control_dependencies([not_empty]):
            strings = identity(strings)
        return _producer_queue(strings, [], num_epochs, shuffle, seed, capacity, cancel_op)


def match_filenames_once(pattern, name=None):
    """A local variable holding the sorted names of the files matching the glob `pattern`
    when local_variables_initializer runs (TF1's: matched once, not at every read)."""
    from graphc.variables import Variable
    with name_scope(name, "matching_filenames", [pattern]) as scope:
        return Variable(matching_files(pattern), trainable=False, validate_shape=False,
                        collections=[GraphKeys.LOCAL_VARIABLES], name=scope.rstrip("/"))
