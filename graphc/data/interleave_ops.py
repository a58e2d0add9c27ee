"""Dataset.flat_map and Dataset.interleave: a function from each input element to a
Dataset, whose elements are then flattened in order (flat_map) or taken in turns
(interleave), as TF1's FlatMapDataset and InterleaveDataset do.

The function is traced once, as map's is: called with placeholders of the element, it
builds a Dataset in a private graph. For each input element that Dataset is started with
its captured tensors (those placeholders, or ops on them) computed from the element's
values by the NumPy reference executor."""
import os

from graphc import errors
from graphc.data import structure
from graphc.data.dataset_ops import AUTOTUNE, Dataset, PipelineRun, _scalar_param
from graphc.data.graph_function import _unpacks
from graphc.framework.graph import Graph, get_default_graph
from graphc.ops.constant_ops import placeholder
from graphc.reference_executor import ReferenceExecutable

__all__ = ["FlatMapDataset", "InterleaveDataset"]


class DatasetFunction:
    """map_func traced once into a Dataset over placeholders of the input element."""

    def __init__(self, fn, input_dataset, name):
        self.graph = Graph()
        self.graph.seed = get_default_graph().seed
        with self.graph.as_default():
            args = [placeholder(t, s, name=f"arg{i}") for i, (t, s) in
                    enumerate(zip(input_dataset._types, input_dataset._shapes))]
            packed = structure.pack(input_dataset._structure, args)
            result = fn(*packed) if _unpacks(input_dataset._structure) else fn(packed)
        if not isinstance(result, Dataset):
            raise TypeError(f"{name}: `map_func` must return a `Dataset` object, got "
                            f"{type(result).__name__}")
        self.dataset = result
        self._captures = result._captures()
        foreign = [t for t in self._captures if t.graph is not self.graph]
        if foreign:
            raise ValueError(f"The function passed to {name} uses {foreign[0].name} of the "
                             f"outer graph; graphc's dataset functions cannot capture tensors "
                             f"(build constants inside the function).")
        self._exe = ReferenceExecutable(args, self._captures, ()) if self._captures else None

    def elements(self, flat_args, state):
        """The elements of the function's Dataset for one input element."""
        values = self._exe.run(flat_args, state) if self._exe is not None else ()
        if len(self._captures) == 1 and not isinstance(values, (list, tuple)):
            values = [values]
        return self.dataset._elements(PipelineRun(dict(zip(self._captures, values))))


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
