"""Datasets of datasets. Dataset.flat_map and Dataset.interleave: a function from each
input element to a Dataset, whose elements are then flattened in order (flat_map) or taken
in turns (interleave), as TF1's FlatMapDataset and InterleaveDataset do. Dataset.window:
elements that are windows of the input, each component a Dataset of its rows.

The function is traced once, as map's is: called with placeholders of the element (or,
for a window, with one WindowComponent dataset per component), it builds a Dataset in a
private graph. For each input element that Dataset is started with its captured tensors
(those placeholders, or ops on them) computed from the element's values by the NumPy
reference executor, and the window's rows."""
import os

import numpy as np

from graphc import dtypes, errors
from graphc.data import structure
from graphc.data.dataset_ops import AUTOTUNE, Dataset, PipelineRun, _scalar_param
from graphc.data.graph_function import GraphFunction, _unpacks
from graphc.framework.graph import Graph, get_default_graph
from graphc.framework.tensor_shape import TensorShape
from graphc.ops.constant_ops import placeholder
from graphc.reference_executor import ReferenceExecutable

__all__ = ["FlatMapDataset", "InterleaveDataset", "WindowDataset", "GroupByWindowDataset"]


class DatasetFunction:
    """map_func traced once into a Dataset over placeholders of the input element."""

    def __init__(self, fn, input_dataset, name):
        self.graph = Graph()
        self.graph.seed = get_default_graph().seed
        with self.graph.as_default():
            if input_dataset._windows:
                args = [WindowComponent(t, s, i) for i, (t, s) in
                        enumerate(zip(input_dataset._types, input_dataset._shapes))]
            else:
                args = [placeholder(t, s, name=f"arg{i}") for i, (t, s) in
                        enumerate(zip(input_dataset._types, input_dataset._shapes))]
            self._windows = input_dataset._windows
            packed = structure.pack(input_dataset._structure, args)
            result = fn(*packed) if _unpacks(input_dataset._structure) else fn(packed)
        self.dataset, self._captures = _checked_result(result, self.graph, name, "map_func")
        self._exe = None if self._windows or not self._captures else \
            ReferenceExecutable(args, self._captures, ())

    def elements(self, flat_args, state):
        """The elements of the function's Dataset for one input element (for a window:
        its list of flat elements)."""
        if self._windows:
            return self.dataset._elements(PipelineRun({WindowComponent.ROWS: flat_args}))
        captured = _captured_values(self._exe, self._captures, flat_args, state)
        return self.dataset._elements(PipelineRun(captured))


def _checked_result(result, graph, where, arg):
    """The Dataset a traced dataset function (`arg` of `where`) returned, and the tensors
    it captures, all of its own graph: the function runs per element on the reference
    executor with no access to the outer graph's values."""
    if not isinstance(result, Dataset):
        raise TypeError(f"{where}: `{arg}` must return a `Dataset` object, got "
                        f"{type(result).__name__}")
    captures = result._captures()
    foreign = [t for t in captures if t.graph is not graph]
    if foreign:
        raise ValueError(f"The {arg} passed to {where} uses {foreign[0].name} of the outer "
                         f"graph; graphc's dataset functions cannot capture tensors (build "
                         f"constants inside the function).")
    return result, captures


def _captured_values(exe, captures, args, state):
    """{captured tensor: its value} for one call of a traced dataset function."""
    values = exe.run(args, state) if exe is not None else ()
    if len(captures) == 1 and not isinstance(values, (list, tuple)):
        values = [values]
    return dict(zip(captures, values))


class _NestedDataset(Dataset):
    def __init__(self, input_dataset, map_func, name):
        self._input = input_dataset
        self._children = (input_dataset,)
        self._fn = DatasetFunction(map_func, input_dataset, name)
        self._structure = self._fn.dataset._structure
        self._types = self._fn.dataset._types
        self._shapes = self._fn.dataset._shapes


class FlatMapDataset(_NestedDataset):
    def __init__(self, input_dataset, map_func):
        super().__init__(input_dataset, map_func, "Dataset.flat_map")

    def _elements(self, run):
        state = run.fn_state(self)
        for element in self._input._elements(run):
            yield from self._fn.elements(element, state)


class InterleaveDataset(_NestedDataset):
    """Up to cycle_length inner datasets open at once, block_length elements from each in
    turn; an exhausted one is replaced, in its place of the cycle, by the next input
    element's (TF1's InterleaveDataset, element for element)."""

    def __init__(self, input_dataset, map_func, cycle_length, block_length):
        super().__init__(input_dataset, map_func, "Dataset.interleave")
        self._cycle_length = _scalar_param(cycle_length, "cycle_length")
        self._block_length = _scalar_param(block_length, "block_length")
        self._params = [self._cycle_length, self._block_length]
        if isinstance(self._block_length, int) and self._block_length <= 0:
            raise ValueError("block_length must be greater than zero.")

    def _elements(self, run):
        cycle = run.scalar(self._cycle_length)
        if cycle == AUTOTUNE:  # TF1: derived from the number of CPU cores
            cycle = os.cpu_count() or 1
        block = run.scalar(self._block_length)
        if cycle <= 0 or block <= 0:
            raise errors.KernelError("interleave: cycle_length and block_length must be "
                                     "greater than zero.", errors.InvalidArgumentError)
        state = run.fn_state(self)
        inputs = self._input._elements(run)
        open_ = [None] * cycle
        index = taken = num_open = 0
        end_of_input = False
        while not end_of_input or num_open > 0:
            if open_[index] is not None:
                element = next(open_[index], None)
                if element is not None:
                    yield element
                    taken += 1
                    if taken == block:
                        index, taken = (index + 1) % cycle, 0
                    continue
                open_[index] = None
                num_open -= 1
                index, taken = (index + 1) % cycle, 0
            elif not end_of_input:
                element = next(inputs, None)
                if element is None:
                    end_of_input = True
                else:
                    open_[index] = iter(self._fn.elements(element, state))
                    num_open += 1
            else:
                index, taken = (index + 1) % cycle, 0


class WindowDataset(Dataset):
    """Windows of `size` elements taken every `stride`-th from the input, a new window
    every `shift` elements (default: size); the last ones may be shorter unless
    drop_remainder. A window is one Dataset per component (in the element's structure),
    so the windows go to flat_map or interleave, e.g. .flat_map(lambda w: w.batch(3))."""

    def __init__(self, input_dataset, size, shift, stride, drop_remainder):
        from graphc.data.dataset_ops import check_not_windows
        check_not_windows(input_dataset, "Dataset.window")
        self._input = input_dataset
        self._children = (input_dataset,)
        self._size = _scalar_param(size, "size")
        self._shift = _scalar_param(shift if shift is not None else size, "shift")
        self._stride = _scalar_param(stride, "stride")
        self._params = [self._size, self._shift, self._stride]
        for value, what in ((self._size, "size"), (self._shift, "shift"),
                            (self._stride, "stride")):
            if isinstance(value, int) and value <= 0:
                raise ValueError(f"Dataset.window: {what} must be greater than zero, got "
                                 f"{value}")
        self._drop_remainder = bool(drop_remainder)
        self._structure = input_dataset._structure
        self._types = input_dataset._types
        self._shapes = input_dataset._shapes
        self._windows = True

    def _elements(self, run):
        size, shift, stride = (run.scalar(p) for p in self._params)
        if min(size, shift, stride) <= 0:
            raise errors.KernelError("Dataset.window: size, shift and stride must be greater "
                                     "than zero.", errors.InvalidArgumentError)
        span = (size - 1) * stride + 1  # input elements one full window covers
        buffer, skip = [], 0  # skip: elements before the next window starts
        for element in self._input._elements(run):
            if skip:
                skip -= 1
                continue
            buffer.append(element)
            if len(buffer) == span:
                yield buffer[::stride]
                skip = max(shift - len(buffer), 0)
                del buffer[:shift]
        while buffer:  # the input ended: what is left starts shorter windows
            if self._drop_remainder:
                return
            yield buffer[::stride][:size]
            del buffer[:shift]


class WindowComponent(Dataset):
    """One component of a window, as the Dataset map_func receives: its rows come from
    the window the pipeline is at."""

    ROWS = "window rows"  # the PipelineRun's captured key holding the window

    def __init__(self, dtype, shape, index):
        self._structure = structure.LEAF
        self._types = [dtype]
        self._shapes = [shape]
        self._index = index

    def _elements(self, run):
        for element in run.captured[WindowComponent.ROWS]:
            yield [element[self._index]]


class GroupByWindowDataset(Dataset):
    """tf.contrib.data.group_by_window: elements gathered by key_func(element) (an int64)
    into groups; a group of window_size_func(key) elements becomes
    reduce_func(key, window_dataset), whose elements are the output. When the input ends
    the unfinished groups are reduced too, in increasing key order (TF1's ordered map)."""

    def __init__(self, input_dataset, key_func, reduce_func, window_size_func):
        from graphc.data.dataset_ops import check_not_windows
        check_not_windows(input_dataset, "group_by_window")
        self._input = input_dataset
        self._children = (input_dataset,)
        self._key_fn = GraphFunction(key_func, input_dataset._structure, input_dataset._types,
                                     input_dataset._shapes, name="group_by_window key_func")
        self._size_fn = GraphFunction(window_size_func, structure.LEAF, [dtypes.int64],
                                      [TensorShape([])],
                                      name="group_by_window window_size_func")
        for fn, what in ((self._key_fn, "key_func"), (self._size_fn, "window_size_func")):
            if len(fn.outputs) != 1 or fn.out_types[0] != dtypes.int64 or \
                    fn.out_shapes[0].ndims not in (0, None):
                raise ValueError(f"group_by_window: `{what}` must return a single tf.int64 "
                                 f"scalar, got {fn.out_types} with shapes {fn.out_shapes}")
        self._reduce = _ReduceFunction(reduce_func, input_dataset)
        self._structure = self._reduce.dataset._structure
        self._types = self._reduce.dataset._types
        self._shapes = self._reduce.dataset._shapes

    def _elements(self, run):
        key_state, size_state = run.fn_state((self, "key")), run.fn_state((self, "size"))
        reduce_state = run.fn_state((self, "reduce"))
        groups = {}
        for element in self._input._elements(run):
            key = int(np.asarray(self._key_fn(element, key_state)[0]))
            size = int(np.asarray(self._size_fn([np.int64(key)], size_state)[0]))
            if size <= 0:
                raise errors.KernelError(f"group_by_window: window size must be greater than "
                                         f"zero, but got {size} (key {key}).",
                                         errors.InvalidArgumentError)
            group = groups.setdefault(key, [])
            group.append(element)
            if len(group) >= size:
                yield from self._reduce.elements(key, groups.pop(key), reduce_state)
        for key in sorted(groups):
            yield from self._reduce.elements(key, groups[key], reduce_state)


class _ReduceFunction:
    """group_by_window's reduce_func(key, window) traced once: key an int64 placeholder,
    window a GroupWindow dataset of the input's elements."""

    def __init__(self, fn, input_dataset):
        self.graph = Graph()
        self.graph.seed = get_default_graph().seed
        with self.graph.as_default():
            self._key = placeholder(dtypes.int64, [], name="key")
            result = fn(self._key, GroupWindow(input_dataset))
        self.dataset, self._captures = _checked_result(result, self.graph, "group_by_window",
                                                       "reduce_func")
        self._exe = ReferenceExecutable([self._key], self._captures, ()) \
            if self._captures else None

    def elements(self, key, rows, state):
        captured = _captured_values(self._exe, self._captures, [np.int64(key)], state)
        captured[WindowComponent.ROWS] = rows
        return self.dataset._elements(PipelineRun(captured))


class GroupWindow(Dataset):
    """The elements of one group, as the Dataset reduce_func receives."""

    def __init__(self, input_dataset):
        self._structure = input_dataset._structure
        self._types = input_dataset._types
        self._shapes = input_dataset._shapes

    def _elements(self, run):
        yield from run.captured[WindowComponent.ROWS]
