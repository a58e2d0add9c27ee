"""tf.data.Dataset: input pipelines that run on the host, in Python and NumPy.

A Dataset is a description (a small tree of dataset objects); nothing runs until an
iterator is initialized in a Session (see iterator_ops.py). An initialized iterator is
a Python generator of flat elements (one NumPy array per component) built by
`_elements(run)`; `run` (a PipelineRun) holds what is fixed for that initialization:
the values of captured tensors (placeholders fed to the initializer, batch sizes given
as tensors), random generators for shuffling, and the state of map functions.

Speed: datasets whose elements are rows of in-memory arrays (from_tensor_slices, and
shuffle/repeat/take/skip/prefetch over it) also provide `_index_chunks(run)`, a stream
of row indices. batch() over such a dataset gathers a whole batch with one fancy index
per component instead of stacking rows one by one, so a shuffled, batched pipeline costs
about as much per step as slicing the arrays for feed_dict by hand.

prefetch() is accepted and changes nothing: the reference executor runs the pipeline
synchronously, right before the step that consumes it.
"""
import itertools

import numpy as np

from graphc import dtypes, errors
from graphc.data import structure
from graphc.data.graph_function import GraphFunction, check_predicate
from graphc.framework.graph import Tensor
from graphc.framework.op_kernel import SessionState
from graphc.framework.tensor_shape import TensorShape, as_shape
from graphc.ops import random_ops

__all__ = ["Dataset"]

AUTOTUNE = -1
_CHUNK = 1024  # indices per chunk of an index stream; random draws per refill


class PipelineRun:
    """What one initialization of an iterator fixes: captured values and random state."""

    def __init__(self, captured):
        self.captured = captured
        self._rngs = {}
        self._fn_states = {}
        self._caches = {}

    def value(self, x):
        return self.captured[x] if isinstance(x, Tensor) else x

    def scalar(self, x):
        return None if x is None else int(np.asarray(self.value(x)))

    def fn_state(self, key):
        return self._fn_states.setdefault(key, SessionState())

    def cache(self, ds):
        """The elements `ds` (a cache()) recorded, and whether its input was exhausted."""
        return self._caches.setdefault(ds, ([], [False]))

    def shuffle_rng(self, ds):
        """The generator for one epoch of `ds`: reshuffling datasets keep drawing from one
        generator (a new order each epoch), the others restart from a fixed seed."""
        base = self._rngs.get(ds)
        if base is None:
            seed = ds._seeds if ds._seeds != (None, None) else \
                tuple(int(s) for s in np.random.SeedSequence().generate_state(2))
            base = self._rngs[ds] = (np.random.default_rng([int(s or 0) for s in seed]),
                                     seed)
        rng, seed = base
        if ds._reshuffle:
            return rng
        return np.random.default_rng([int(s or 0) for s in seed])


class Dataset:
    """Base class: subclasses set _structure, _types, _shapes and implement _elements."""

    _children = ()
    _params = ()  # parameters that may be tensors (captured), e.g. batch_size
    _windows = False  # elements are windows (Dataset.window): only flat_map/interleave them

    # ------------------------------------------------------------------ sources
    @staticmethod
    def from_tensor_slices(tensors):
        return _TensorSliceDataset(tensors)

    @staticmethod
    def from_tensors(tensors):
        return _TensorDataset(tensors)

    @staticmethod
    def range(*args, output_type=dtypes.int64):
        return _RangeDataset(*args, output_type=output_type)

    @staticmethod
    def zip(datasets):
        return _ZipDataset(datasets)

    @staticmethod
    def from_generator(generator, output_types, output_shapes=None, args=None):
        return _GeneratorDataset(generator, output_types, output_shapes, args)

    # -------------------------------------------------------------- transforms
    def map(self, map_func, num_parallel_calls=None, deterministic=None):
        return _MapDataset(self, map_func)

    def filter(self, predicate):
        return _FilterDataset(self, predicate)

    def batch(self, batch_size, drop_remainder=False):
        return _BatchDataset(self, batch_size, drop_remainder)

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=None):
        return _ShuffleDataset(self, buffer_size, seed, reshuffle_each_iteration)

    def repeat(self, count=None):
        return _RepeatDataset(self, count)

    def take(self, count):
        return _TakeDataset(self, count)

    def skip(self, count):
        return _SkipDataset(self, count)

    def prefetch(self, buffer_size):
        return _PrefetchDataset(self, buffer_size)

    def concatenate(self, dataset):
        return _ConcatenateDataset(self, dataset)

    def padded_batch(self, batch_size, padded_shapes, padding_values=None,
                     drop_remainder=False):
        return _PaddedBatchDataset(self, batch_size, padded_shapes, padding_values,
                                   drop_remainder)

    def cache(self, filename=""):
        return _CacheDataset(self, filename)

    def window(self, size, shift=None, stride=1, drop_remainder=False):
        from graphc.data.interleave_ops import WindowDataset
        return WindowDataset(self, size, shift, stride, drop_remainder)

    def flat_map(self, map_func):
        from graphc.data.interleave_ops import FlatMapDataset
        return FlatMapDataset(self, map_func)

    def interleave(self, map_func, cycle_length=AUTOTUNE, block_length=1,
                   num_parallel_calls=None, deterministic=None):
        from graphc.data.interleave_ops import InterleaveDataset
        return InterleaveDataset(self, map_func, cycle_length, block_length)

    def apply(self, transformation_func):
        return transformation_func(self)

    # ---------------------------------------------------------------- iterators
    def make_one_shot_iterator(self):
        from graphc.data.iterator_ops import make_one_shot_iterator
        return make_one_shot_iterator(self)

    def make_initializable_iterator(self, shared_name=None):
        from graphc.data.iterator_ops import make_initializable_iterator
        return make_initializable_iterator(self, shared_name)

    # -------------------------------------------------------------- structure
    output_types = property(lambda self: structure.pack(self._structure, self._types))
    output_shapes = property(lambda self: structure.pack(self._structure, self._shapes))
    output_classes = property(lambda self: structure.pack(self._structure,
                                                          [Tensor] * len(self._types)))

    def _captures(self):
        """The tensors of the user's graph whose values the pipeline needs."""
        own = [p for p in self._params if isinstance(p, Tensor)]
        for child in self._children:
            own.extend(child._captures())
        return list(dict.fromkeys(own))

    def _slice_source(self):
        """The _TensorSliceDataset whose rows this dataset yields, or None."""
        return None

    def _elements(self, run):
        """A generator of flat elements. Default: rows picked by the index stream."""
        arrays = self._slice_source()._arrays(run)
        for chunk in self._index_chunks(run):
            for i in chunk.tolist():
                yield [a[i] for a in arrays]

    def __repr__(self):
        return f"<{type(self).__name__.lstrip('_')} shapes: {self.output_shapes}, " \
               f"types: {self.output_types}>"


def check_not_windows(dataset, what):
    """Window elements are datasets, not tensors: refused where tensors are needed."""
    if dataset._windows:
        raise TypeError(f"{what} needs elements of tensors, but this dataset's elements are "
                        f"windows (Dataset.window): turn each window into tensors first, "
                        f"e.g. .flat_map(lambda w: w.batch(size))")


def _scalar_param(x, name):
    """A count or size: a Python int, or an integer scalar tensor (captured)."""
    if hasattr(x, "_as_tensor"):
        x = x._as_tensor()
    if isinstance(x, Tensor):
        if not x.dtype.is_integer or x.shape.ndims not in (0, None):
            raise TypeError(f"{name} must be an integer scalar, got {x!r}")
        return x
    if x is None:
        return None
    return int(x)


def _rebatch(chunks, size, drop_remainder):
    """Index chunks regrouped into batches of `size` indices."""
    pending, count = [], 0
    for c in chunks:
        while len(c):
            part, c = c[:size - count], c[size - count:]
            pending.append(part)
            count += len(part)
            if count == size:
                yield np.concatenate(pending) if len(pending) > 1 else pending[0]
                pending, count = [], 0
    if count and not drop_remainder:
        yield np.concatenate(pending)


def _chunked(ints):
    """Regroups a stream of Python ints into index arrays."""
    while True:
        chunk = list(itertools.islice(ints, _CHUNK))
        if not chunk:
            return
        yield np.array(chunk, dtype=np.int64)


# ---------------------------------------------------------------------------- sources
class _TensorSliceDataset(Dataset):
    def __init__(self, tensors):
        self._structure = structure.structure_of(tensors)
        self._leaves = [structure.as_component(v) for v in structure.flatten(tensors)]
        self._params = [leaf for leaf in self._leaves if isinstance(leaf, Tensor)]
        specs = [structure.component_spec(leaf) for leaf in self._leaves]
        rows = None
        for dtype, shape in specs:
            if shape.ndims == 0:
                raise ValueError("Unbatching a tensor is only supported for rank >= 1")
            first = shape[0].value if shape.ndims else None
            if first is not None and rows is not None and first != rows:
                raise ValueError(f"Dimensions {rows} and {first} are not compatible")
            rows = first if first is not None else rows
        self._types = [d for d, _ in specs]
        self._shapes = [TensorShape(None) if s.ndims is None else s[1:] for _, s in specs]

    def _arrays(self, run):
        arrays = [np.asarray(run.value(leaf)) for leaf in self._leaves]
        for a in arrays:
            if a.ndim == 0:
                raise errors.KernelError("Unbatching a tensor is only supported for rank >= 1")
            if len(a) != len(arrays[0]):
                raise errors.KernelError(f"Dimensions {len(arrays[0])} and {len(a)} are not "
                                         "compatible: all components of from_tensor_slices "
                                         "need the same first dimension")
        return arrays

    def _slice_source(self):
        return self

    def _index_chunks(self, run):
        n = len(run.value(self._leaves[0]))
        for start in range(0, n, _CHUNK):
            yield np.arange(start, min(n, start + _CHUNK))


class _TensorDataset(Dataset):
    def __init__(self, tensors):
        self._structure = structure.structure_of(tensors)
        self._leaves = [structure.as_component(v) for v in structure.flatten(tensors)]
        self._params = [leaf for leaf in self._leaves if isinstance(leaf, Tensor)]
        specs = [structure.component_spec(leaf) for leaf in self._leaves]
        self._types = [d for d, _ in specs]
        self._shapes = [s for _, s in specs]

    def _elements(self, run):
        yield [np.asarray(run.value(leaf)) for leaf in self._leaves]


class _RangeDataset(Dataset):
    def __init__(self, *args, output_type=dtypes.int64):
        if not 1 <= len(args) <= 3:
            raise ValueError(f"range takes 1 to 3 arguments (stop | start, stop[, step]), "
                             f"got {len(args)}")
        self._params = [_scalar_param(a, "range argument") for a in args]
        if len(self._params) == 3 and self._params[2] == 0:
            raise ValueError("step must not be 0")
        self._structure = structure.LEAF
        self._types = [dtypes.as_dtype(output_type)]
        self._shapes = [TensorShape([])]

    def _elements(self, run):
        args = [run.scalar(a) for a in self._params]
        if len(args) == 3 and args[2] == 0:
            raise errors.KernelError("step must not be 0")
        np_type = self._types[0].np
        for v in range(*args):
            yield [np.array(v, dtype=np_type)]


class _GeneratorDataset(Dataset):
    def __init__(self, generator, output_types, output_shapes, args):
        self._generator = generator
        self._args = tuple(args or ())
        self._structure = structure.structure_of(output_types)
        self._types = [dtypes.as_dtype(t) for t in structure.flatten(output_types)]
        if output_shapes is None:
            self._shapes = [TensorShape(None)] * len(self._types)
        else:
            shapes = structure.flatten(_shapes_as_tuples(output_shapes))
            self._shapes = [as_shape(s) for s in shapes]
            if len(self._shapes) != len(self._types):
                raise TypeError("output_shapes must have the same structure as output_types")

    def _elements(self, run):
        for value in self._generator(*self._args):
            flat = structure.flatten(value)
            if len(flat) != len(self._types):
                raise errors.KernelError(f"`generator` yielded an element that did not match "
                                         f"the expected structure: {value!r}")
            out = []
            for v, t, s in zip(flat, self._types, self._shapes):
                a = np.asarray(v, dtype=t.np)
                if not s.is_compatible_with(a.shape):
                    raise errors.KernelError(f"`generator` yielded an element of shape "
                                             f"{a.shape} where an element of shape {s} was "
                                             "expected.")
                out.append(a)
            yield out


def _shapes_as_tuples(shapes):
    """output_shapes leaves may be lists ([None, 3]); only tuples and dicts nest."""
    if isinstance(shapes, dict):
        return {k: _shapes_as_tuples(v) for k, v in shapes.items()}
    if isinstance(shapes, tuple) and not all(
            isinstance(s, (int, type(None))) for s in shapes):
        return tuple(_shapes_as_tuples(s) for s in shapes)
    return as_shape(shapes)


class _ZipDataset(Dataset):
    def __init__(self, datasets):
        if isinstance(datasets, Dataset) or not isinstance(datasets, (tuple, list)):
            raise TypeError("zip() expects a tuple of datasets, as Dataset.zip((a, b))")
        self._children = tuple(datasets)
        for d in self._children:
            if not isinstance(d, Dataset):
                raise TypeError(f"zip() got a {type(d).__name__}, not a Dataset")
            check_not_windows(d, "Dataset.zip")
        self._structure = tuple(d._structure for d in self._children)
        self._types = [t for d in self._children for t in d._types]
        self._shapes = [s for d in self._children for s in d._shapes]

    def _elements(self, run):
        for parts in zip(*(d._elements(run) for d in self._children)):
            yield [c for p in parts for c in p]


# --------------------------------------------------------------------------- transforms
class _UnaryDataset(Dataset):
    """A transform that keeps its input's element structure."""

    def __init__(self, input_dataset):
        self._input = input_dataset
        self._children = (input_dataset,)
        self._structure = input_dataset._structure
        self._types = input_dataset._types
        self._shapes = input_dataset._shapes
        self._windows = input_dataset._windows


class _MapDataset(Dataset):
    def __init__(self, input_dataset, map_func):
        check_not_windows(input_dataset, "Dataset.map")
        self._input = input_dataset
        self._children = (input_dataset,)
        self._fn = GraphFunction(map_func, input_dataset._structure, input_dataset._types,
                                 input_dataset._shapes, name="Dataset.map")
        self._structure = self._fn.out_structure
        self._types = self._fn.out_types
        self._shapes = self._fn.out_shapes

    def _elements(self, run):
        state = run.fn_state(self)
        for element in self._input._elements(run):
            yield self._fn(element, state)


class _FilterDataset(_UnaryDataset):
    def __init__(self, input_dataset, predicate):
        check_not_windows(input_dataset, "Dataset.filter")
        super().__init__(input_dataset)
        self._fn = GraphFunction(predicate, input_dataset._structure, input_dataset._types,
                                 input_dataset._shapes, name="Dataset.filter")
        check_predicate(self._fn)

    def _elements(self, run):
        state = run.fn_state(self)
        for element in self._input._elements(run):
            if self._fn(element, state)[0]:
                yield element


class _BatchDataset(Dataset):
    def __init__(self, input_dataset, batch_size, drop_remainder):
        check_not_windows(input_dataset, "Dataset.batch")
        self._input = input_dataset
        self._children = (input_dataset,)
        self._batch_size = _scalar_param(batch_size, "batch_size")
        if isinstance(self._batch_size, int) and self._batch_size <= 0:
            raise ValueError("Batch size must be greater than zero.")
        self._params = [self._batch_size]
        self._drop_remainder = bool(drop_remainder)
        static = self._batch_size if (self._drop_remainder and
                                      isinstance(self._batch_size, int)) else None
        self._structure = input_dataset._structure
        self._types = input_dataset._types
        self._shapes = [TensorShape([static]).concatenate(s) for s in input_dataset._shapes]

    def _elements(self, run):
        size = run.scalar(self._batch_size)
        if size <= 0:
            raise errors.KernelError("Batch size must be greater than zero.")
        source = self._input._slice_source()
        if source is not None:  # gather whole batches of rows
            arrays = source._arrays(run)
            for idx in _rebatch(self._input._index_chunks(run), size, self._drop_remainder):
                yield [a[idx] for a in arrays]
            return
        pending, n = [], len(self._types)
        for element in self._input._elements(run):
            pending.append(element)
            if len(pending) == size:
                yield structure.stack_components(pending, n)
                pending = []
        if pending and not self._drop_remainder:
            yield structure.stack_components(pending, n)


class _PaddedBatchDataset(Dataset):
    """batch() of elements padded, per component, to padded_shapes (a dimension of None or
    -1: to the largest in the batch) with padding_values (default 0, False or b"")."""

    def __init__(self, input_dataset, batch_size, padded_shapes, padding_values,
                 drop_remainder):
        check_not_windows(input_dataset, "Dataset.padded_batch")
        self._input = input_dataset
        self._children = (input_dataset,)
        self._batch_size = _scalar_param(batch_size, "batch_size")
        if isinstance(self._batch_size, int) and self._batch_size <= 0:
            raise ValueError("Batch size must be greater than zero.")
        self._drop_remainder = bool(drop_remainder)
        self._padded = _flat_like(input_dataset, padded_shapes, "padded_shapes",
                                  _padded_shape)
        for padded, shape in zip(self._padded, input_dataset._shapes):
            if not _fits(padded, shape):
                raise ValueError(f"padded_batch: the padded shape {padded} is not "
                                 f"compatible with the corresponding input component shape "
                                 f"{shape}.")
        self._padding = [None] * len(input_dataset._types) if padding_values is None else \
            _flat_like(input_dataset, padding_values, "padding_values", lambda v: v)
        for value, dtype in zip(self._padding, input_dataset._types):
            _check_padding_value(value, dtype)
        self._params = [self._batch_size] + [v for v in self._padding if isinstance(v, Tensor)]
        static = self._batch_size if (self._drop_remainder and
                                      isinstance(self._batch_size, int)) else None
        self._structure = input_dataset._structure
        self._types = input_dataset._types
        self._shapes = [TensorShape([static]).concatenate(p) for p in self._padded]

    def _elements(self, run):
        size = run.scalar(self._batch_size)
        if size <= 0:
            raise errors.KernelError("Batch size must be greater than zero.")
        pending = []
        for element in self._input._elements(run):
            pending.append(element)
            if len(pending) == size:
                yield self._pad(pending, run)
                pending = []
        if pending and not self._drop_remainder:
            yield self._pad(pending, run)

    def _pad(self, elements, run):
        out = []
        for c, (padded, dtype, value) in enumerate(zip(self._padded, self._types,
                                                       self._padding)):
            parts = [np.asarray(e[c]) for e in elements]
            dims = [padded[i].value if padded[i].value is not None else
                    max(p.shape[i] for p in parts) for i in range(padded.ndims)]
            fill = _default_padding(dtype) if value is None else np.asarray(run.value(value))
            batch = np.full([len(parts)] + dims, fill, dtype=dtype.np)
            for i, part in enumerate(parts):
                if part.ndim != len(dims) or any(d > t for d, t in zip(part.shape, dims)):
                    raise errors.KernelError(
                        f"padded_batch: attempted to pad to a smaller size than the input "
                        f"element: component {c} of shape {list(part.shape)} into "
                        f"{dims}.", errors.InvalidArgumentError)
                batch[(i,) + tuple(slice(0, d) for d in part.shape)] = part
            out.append(batch)
        return out


def _flat_like(dataset, value, what, convert):
    """`value`, nested like the dataset's elements (a tuple of ints and None is one
    shape), flattened to one converted item per component."""
    if dataset._structure is structure.LEAF:
        flat = [value]
    else:
        flat = _nested_leaves(value)
    if len(flat) != len(dataset._types):
        raise ValueError(f"padded_batch: {what} {value!r} must have the structure of the "
                         f"dataset's elements {dataset.output_shapes}")
    try:
        return [convert(v) for v in flat]
    except (TypeError, ValueError) as e:
        raise TypeError(f"padded_batch: cannot read {what} {value!r}: {e}") from None


def _nested_leaves(value):
    if isinstance(value, dict):
        return [x for k in sorted(value) for x in _nested_leaves(value[k])]
    if isinstance(value, tuple) and not all(isinstance(v, (int, type(None))) for v in value):
        return [x for v in value for x in _nested_leaves(v)]
    return [value]


def _padded_shape(value):
    if isinstance(value, Tensor):
        from graphc.framework.static_value import constant_value
        known = constant_value(value)
        if known is None:
            raise TypeError("a padded shape given as a tensor must be a constant")
        value = known
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        value = [None if d is None or int(d) == -1 else int(d) for d in value]
    return as_shape(value)


def _fits(padded, shape):
    if padded.ndims is None:
        raise ValueError("padded_batch: padded shapes need a known rank")
    if shape.ndims is None:
        return True
    return shape.ndims == padded.ndims and all(
        p.value is None or s.value is None or s.value <= p.value for p, s in zip(padded, shape))


def _check_padding_value(value, dtype):
    if value is None:
        return
    if isinstance(value, Tensor):
        if value.dtype.base_dtype != dtype.base_dtype or value.shape.ndims not in (0, None):
            raise TypeError(f"padded_batch: padding value {value!r} must be a scalar of the "
                            f"component's dtype {dtype.name}")
        return
    if np.ndim(value) != 0:
        raise ValueError(f"padded_batch: padding value {value!r} must be a scalar")
    if dtype.is_floating is False and isinstance(value, float) and not float(value).is_integer():
        raise TypeError(f"padded_batch: padding value {value!r} does not fit the component's "
                        f"dtype {dtype.name}")


def _default_padding(dtype):
    return b"" if dtype == dtypes.string else np.zeros((), dtype.np)


def _buffer_shuffle(items, size, rng):
    """TF's shuffle: a buffer of `size` items; each output is a uniformly chosen item of
    the buffer, replaced by the next input; the rest is emptied in random order."""
    buf, draws, k = [], (), 0
    for item in items:
        if len(buf) < size:
            buf.append(item)
            continue
        if k == len(draws):
            draws, k = rng.integers(size, size=_CHUNK).tolist(), 0
        j = draws[k]
        k += 1
        out, buf[j] = buf[j], item
        yield out
    for j in rng.permutation(len(buf)).tolist():
        yield buf[j]


class _ShuffleDataset(_UnaryDataset):
    def __init__(self, input_dataset, buffer_size, seed, reshuffle_each_iteration):
        super().__init__(input_dataset)
        self._buffer_size = _scalar_param(buffer_size, "buffer_size")
        if isinstance(self._buffer_size, int) and self._buffer_size <= 0:
            raise ValueError("buffer_size must be greater than zero.")
        self._params = [self._buffer_size]
        self._seeds = random_ops.get_seed(seed)
        self._reshuffle = reshuffle_each_iteration is not False

    def _size(self, run):
        size = run.scalar(self._buffer_size)
        if size <= 0:
            raise errors.KernelError("buffer_size must be greater than zero.")
        return size

    def _slice_source(self):
        return self._input._slice_source()

    def _index_chunks(self, run):
        ints = (i for c in self._input._index_chunks(run) for i in c.tolist())
        return _chunked(_buffer_shuffle(ints, self._size(run), run.shuffle_rng(self)))

    def _elements(self, run):
        if self._slice_source() is not None:
            return super()._elements(run)
        return _buffer_shuffle(self._input._elements(run), self._size(run),
                               run.shuffle_rng(self))


class _CountedDataset(_UnaryDataset):
    """repeat, take and skip: a scalar `count` over the input's elements, which keep their
    slice source (a pipeline of slices stays index chunks: see _index_chunks)."""

    def __init__(self, input_dataset, count):
        super().__init__(input_dataset)
        self._count = _scalar_param(count, "count")
        self._params = [self._count]

    def _slice_source(self):
        return self._input._slice_source()

    def _elements(self, run):
        if self._slice_source() is not None:
            return super()._elements(run)
        return self._counted(run.scalar(self._count), lambda: self._input._elements(run))

    def _counted(self, count, elements):
        """The elements out of `count` and `elements()`, a new pass over the input's."""
        raise NotImplementedError


class _RepeatDataset(_CountedDataset):
    def _counted(self, count, epoch):
        n = 0
        while count is None or count < 0 or n < count:
            empty = True
            for x in epoch():
                empty = False
                yield x
            if empty:  # repeating nothing forever would hang
                return
            n += 1

    def _index_chunks(self, run):
        return self._counted(run.scalar(self._count), lambda: self._input._index_chunks(run))


class _TakeDataset(_CountedDataset):
    def _index_chunks(self, run):
        left = run.scalar(self._count)
        for c in self._input._index_chunks(run):
            if 0 <= left <= len(c):
                if left:
                    yield c[:left]
                return
            if left > 0:
                left -= len(c)
            yield c

    @staticmethod
    def _counted(count, elements):
        return elements() if count < 0 else itertools.islice(elements(), count)


class _SkipDataset(_CountedDataset):
    def _index_chunks(self, run):
        left = run.scalar(self._count)
        for c in self._input._index_chunks(run):
            if left < 0:  # skip(-1) skips everything
                continue
            if left >= len(c):
                left -= len(c)
                continue
            yield c[left:]
            left = 0

    @staticmethod
    def _counted(count, elements):
        return iter(()) if count < 0 else itertools.islice(elements(), count, None)


class _PrefetchDataset(_UnaryDataset):
    def __init__(self, input_dataset, buffer_size):
        super().__init__(input_dataset)
        self._buffer_size = buffer_size

    def _slice_source(self):
        return self._input._slice_source()

    def _index_chunks(self, run):
        return self._input._index_chunks(run)

    def _elements(self, run):
        return self._input._elements(run)


class _CacheDataset(_UnaryDataset):
    """Records its input's elements on the first complete pass; later passes of the same
    iterator (after repeat) replay them without running the input again. The cache lives
    as long as the iterator's initialization (TF1 keeps an in-memory cache in the
    iterator too)."""

    def __init__(self, input_dataset, filename):
        super().__init__(input_dataset)
        if filename:
            raise NotImplementedError(f"Dataset.cache(filename={filename!r}): graphc caches "
                                      f"in memory only; call cache() without a filename")

    def _elements(self, run):
        recorded, complete = run.cache(self)
        if complete[0]:
            yield from recorded
            return
        recorded.clear()
        for element in self._input._elements(run):
            recorded.append(element)
            yield element
        complete[0] = True


class _ConcatenateDataset(Dataset):
    def __init__(self, first, second):
        if first._windows != second._windows:
            raise TypeError("concatenate: one dataset has windows as elements, the other "
                            "tensors")
        self._windows = first._windows
        structure.check_same_types(first._types, second._types, "concatenate")
        if first._structure != second._structure:
            raise TypeError(f"concatenate: element structures differ: {first._structure!r} "
                            f"vs {second._structure!r}")
        self._children = (first, second)
        self._structure = first._structure
        self._types = first._types
        self._shapes = [_most_specific_compatible(a, b)
                        for a, b in zip(first._shapes, second._shapes)]

    def _elements(self, run):
        for d in self._children:
            yield from d._elements(run)


def _most_specific_compatible(a, b):
    if a.ndims is None or b.ndims is None or a.ndims != b.ndims:
        return TensorShape(None)
    return TensorShape([x.value if x.value == y.value else None for x, y in zip(a, b)])
