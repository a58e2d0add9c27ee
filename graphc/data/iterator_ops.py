"""Iterators: how a host-side Dataset feeds tensors of the graph.

Two op types connect a Dataset (a Python object, see dataset_ops.py) to a Session:

  MakeIterator   (the initializer): inputs are the tensors the dataset captures
      (e.g. a placeholder given to from_tensor_slices); its kernel builds the
      pipeline's Python generator and stores it in the session state under the
      iterator's name (`state.iterators[name]`).
  IteratorGetNext: no inputs; one output per component of the element. Its kernel
      pulls the next element from the generator in the session state, raising
      OutOfRangeError ("End of sequence") when the data is exhausted. A one-shot
      iterator's GetNext builds its generator on the first pull.

Feedable iterators (TF1's `Iterator.from_string_handle`): IteratorToStringHandle gives
an iterator's handle, a string naming it in its graph; IteratorGetNextFromStringHandle
takes a handle as its input (usually a fed placeholder) and pulls from the iterator it
names, so one get_next switches between, say, a training and a validation iterator.

Both are stateful, `uses_context=True` ops: each Session has its own iterator
positions, and each run that needs a GetNext output pulls exactly one element (all
GetNext ops of one iterator share its position, as in TF). The Datasets themselves
are Python objects that the ops find through a per-graph registry keyed by the
"dataset" attr (attrs stay plain strings), so a graph written to a file does not
carry its input pipelines.

For compiled backends: IteratorGetNext depends on nothing in the graph, so a Session
runs these ops on the host first (through their reference kernels) and passes their
outputs to the compiled step as feeds; the compiled code never sees the pipeline.
"""
import itertools
import weakref

import numpy as np

from graphc import dtypes, errors
from graphc.data import structure
from graphc.data.dataset_ops import Dataset, PipelineRun, check_not_windows
from graphc.framework.graph import Tensor, get_default_graph
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.static_value import constant_value
from graphc.framework.tensor_shape import TensorShape, as_shape

__all__ = ["Iterator", "make_one_shot_iterator", "make_initializable_iterator",
           "get_output_types", "get_output_shapes", "get_output_classes"]

_DATASETS = weakref.WeakKeyDictionary()  # Graph -> {dataset key: (Dataset, captured)}
# Graph -> {iterator name: (one-shot dataset key or "", output types)}: what a handle names
_HANDLES = weakref.WeakKeyDictionary()
_keys = itertools.count()


def _register(graph, dataset, captured=None):
    check_not_windows(dataset, "An iterator")
    key = f"dataset_{next(_keys)}"
    _DATASETS.setdefault(graph, {})[key] = (dataset, captured)
    return key


def _lookup(op):
    return _DATASETS[op.graph][op.attrs["dataset"]]


def _dataset_of(graph, key):
    return _DATASETS[graph][key]


def _make_iterator(state, op, *captured_values):
    dataset, _ = _lookup(op)
    run = PipelineRun(dict(zip(op.inputs, captured_values)))
    state.iterators[op.attrs["iterator"]] = dataset._elements(run)
    return ()


def _get_next(state, op):
    return _next_element(state, op.graph, op.attrs["iterator"], op.attrs["dataset"])


def _next_element(state, graph, name, one_shot_key):
    it = state.iterators.get(name)
    if it is None:
        if not one_shot_key:
            raise errors.KernelError(
                "GetNext() failed because the iterator has not been initialized. Ensure that "
                "you have run the initializer operation for this iterator before getting the "
                "next element.", errors.FailedPreconditionError)
        dataset, captured = _dataset_of(graph, one_shot_key)
        it = state.iterators[name] = dataset._elements(PipelineRun(captured))
    try:
        element = next(it)
    except StopIteration:
        raise errors.KernelError("End of sequence", errors.OutOfRangeError) from None
    return element[0] if len(element) == 1 else tuple(element)


def _string_handle(state, op):
    return np.array(op.attrs["iterator"].encode(), dtype=object)


def _get_next_from_handle(state, op, handle):
    name = handle.item() if isinstance(handle, np.ndarray) else handle
    name = name.decode() if isinstance(name, bytes) else str(name)
    entry = _HANDLES.get(op.graph, {}).get(name)
    if entry is None:
        raise errors.KernelError(f"{name!r} is not the string_handle() of an iterator of "
                                 "this graph", errors.InvalidArgumentError)
    one_shot_key, types = entry
    if list(types) != list(op.attrs["output_types"]):
        raise errors.KernelError(
            f"The iterator {name!r} gives elements of types {[t.name for t in types]}, but "
            f"this get_next expects {[t.name for t in op.attrs['output_types']]}",
            errors.InvalidArgumentError)
    return _next_element(state, op.graph, name, one_shot_key)


# host-only: iterators are Python objects in the Session state
register_op("MakeIterator", infer=lambda inputs, a: [], kernel=_make_iterator,
            stateful=True, uses_context=True, kind="opaque", host_only=True)
register_op("IteratorGetNext",
            infer=lambda inputs, a: list(zip(a["output_shapes"], a["output_types"])),
            kernel=_get_next, stateful=True, uses_context=True, kind="opaque", host_only=True)
register_op("IteratorToStringHandle", infer=lambda inputs, a: [(TensorShape([]), dtypes.string)],
            kernel=_string_handle, uses_context=True, kind="opaque", host_only=True)
register_op("IteratorGetNextFromStringHandle",
            infer=lambda inputs, a: list(zip(a["output_shapes"], a["output_types"])),
            kernel=_get_next_from_handle, stateful=True, uses_context=True, kind="opaque",
            host_only=True)
not_differentiable("MakeIterator", "IteratorGetNext", "IteratorToStringHandle",
                   "IteratorGetNextFromStringHandle")


class Iterator:
    """tf.compat.v1.data.Iterator: get_next() gives tensors that advance once per run."""

    def __init__(self, graph, name, structure_, types, shapes, initializer=None,
                 one_shot_key=""):
        self._graph = graph
        self._name = name
        self._structure = structure_
        self._types = list(types)
        self._shapes = list(shapes)
        self._initializer = initializer
        self._one_shot_key = one_shot_key
        self._handle = None  # the string tensor a from_string_handle iterator reads

    @staticmethod
    def from_structure(output_types, output_shapes=None, shared_name=None,
                       output_classes=None):
        """A reinitializable iterator: make_initializer(dataset) points it at a dataset."""
        types = [_dtype(t) for t in structure.flatten(output_types)]
        if output_shapes is None:
            shapes = [TensorShape(None)] * len(types)
        else:
            from graphc.data.dataset_ops import _shapes_as_tuples
            shapes = [as_shape(s) for s in structure.flatten(_shapes_as_tuples(output_shapes))]
        g = get_default_graph()
        return Iterator(g, shared_name or g.unique_name("Iterator"),
                        structure.structure_of(output_types), types, shapes)

    output_types = property(lambda self: structure.pack(self._structure, self._types))
    output_shapes = property(lambda self: structure.pack(self._structure, self._shapes))
    output_classes = property(lambda self: structure.pack(self._structure,
                                                          [Tensor] * len(self._types)))

    @property
    def initializer(self):
        if self._initializer is None:
            raise ValueError("Iterator does not have an initializer.")
        return self._initializer

    def make_initializer(self, dataset, name=None):
        """The op that (re)starts this iterator on `dataset`."""
        if not isinstance(dataset, Dataset):
            raise TypeError(f"make_initializer expects a Dataset, got {dataset!r}")
        if dataset._structure != self._structure:
            raise TypeError(f"Expected output structure {self._structure!r} but got dataset "
                            f"with structure {dataset._structure!r}")
        structure.check_same_types(self._types, dataset._types,
                                   "make_initializer: the dataset does not match the iterator")
        for mine, theirs in zip(self._shapes, dataset._shapes):
            if not mine.is_compatible_with(theirs):
                raise TypeError(f"Expected output shapes compatible with {self._shapes} but "
                                f"got dataset with output shapes {dataset._shapes}")
        captures = dataset._captures()
        for t in captures:
            if t.graph is not self._graph:
                raise ValueError(f"The dataset captures {t.name}, which is not in the "
                                 "iterator's graph.")
        key = _register(self._graph, dataset)
        return self._graph.create_op("MakeIterator", captures,
                                     {"iterator": self._name, "dataset": key},
                                     name or "MakeIterator")

    @staticmethod
    def from_string_handle(string_handle, output_types, output_shapes=None,
                           output_classes=None):
        """A feedable iterator: its get_next pulls from the iterator whose string_handle()
        value `string_handle` holds when the step runs (TF1's way to switch between a
        training and a validation pipeline with one feed)."""
        from graphc.ops.constant_ops import convert_to_tensor
        it = Iterator.from_structure(output_types, output_shapes)
        it._handle = convert_to_tensor(string_handle, dtype=dtypes.string)
        if it._handle.shape.ndims not in (None, 0):
            raise ValueError(f"from_string_handle takes a scalar string handle, got shape "
                             f"{it._handle.shape}")
        it._graph = it._handle.graph
        return it

    def string_handle(self, name=None):
        """A scalar string naming this iterator, for a from_string_handle iterator's feed."""
        _HANDLES.setdefault(self._graph, {})[self._name] = (self._one_shot_key, self._types)
        return self._graph.create_op("IteratorToStringHandle", [],
                                     {"iterator": self._name},
                                     name or "IteratorToStringHandle").outputs[0]

    def get_next(self, name=None):
        types = {"output_types": list(self._types), "output_shapes": list(self._shapes)}
        if self._handle is not None:
            op = self._graph.create_op("IteratorGetNextFromStringHandle", [self._handle],
                                       types, name or "IteratorGetNext")
        else:
            op = self._graph.create_op("IteratorGetNext", [], {
                "iterator": self._name, "dataset": self._one_shot_key, **types},
                name or "IteratorGetNext")
        return structure.pack(self._structure, op.outputs)

    def __repr__(self):
        return f"<Iterator '{self._name}' types={self.output_types}>"


def _dtype(t):
    return dtypes.as_dtype(t)


def make_initializable_iterator(dataset, shared_name=None):
    g = _graph_of(dataset)
    it = Iterator(g, shared_name or g.unique_name("Iterator"), dataset._structure,
                  dataset._types, dataset._shapes)
    it._initializer = it.make_initializer(dataset)
    return it


def make_one_shot_iterator(dataset):
    """An iterator that starts itself on first use; the dataset may capture only values
    known when the graph is built (TF: no placeholders)."""
    g = _graph_of(dataset)
    captured = {}
    for t in dataset._captures():
        value = constant_value(t)
        if value is None:
            raise ValueError(f"Cannot capture a placeholder (name:{t.op.name}, type:{t.op.type}) "
                             "by value: make_one_shot_iterator needs a dataset whose values are "
                             "known when the graph is built; use make_initializable_iterator.")
        captured[t] = value
    key = _register(g, dataset, captured)
    return Iterator(g, g.unique_name("OneShotIterator"), dataset._structure, dataset._types,
                    dataset._shapes, one_shot_key=key)


def _graph_of(dataset):
    captures = dataset._captures()
    return captures[0].graph if captures else get_default_graph()


def get_output_types(dataset_or_iterator):
    return dataset_or_iterator.output_types


def get_output_shapes(dataset_or_iterator):
    return dataset_or_iterator.output_shapes


def get_output_classes(dataset_or_iterator):
    return dataset_or_iterator.output_classes
