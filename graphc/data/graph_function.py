"""Graph functions: a Python function traced once into a private graph, run on the host.

Dataset.map and filter call the user's function with symbolic tensors (placeholders of
the element's dtypes and static shapes), as TF1 does; the ops it builds land in a
graph of their own, which the NumPy reference executor then runs once per element.
The function cannot capture tensors of the user's graph (their values live in a
Session the pipeline does not see); a constant built inside the function is fine.
"""
from graphc import dtypes
from graphc.data import structure
from graphc.framework.graph import Graph, get_default_graph
from graphc.ops.constant_ops import convert_to_tensor, placeholder
from graphc.reference_executor import ReferenceExecutable


class GraphFunction:
    def __init__(self, fn, arg_structure, arg_types, arg_shapes, name="fn"):
        self.graph = Graph()
        self.graph.seed = get_default_graph().seed
        with self.graph.as_default():
            self.args = [placeholder(t, s, name=f"arg{i}")
                         for i, (t, s) in enumerate(zip(arg_types, arg_shapes))]
            packed = structure.pack(arg_structure, self.args)
            try:
                result = fn(*packed) if _unpacks(arg_structure) else fn(packed)
            except ValueError as e:
                if "must be from the same graph" in str(e):
                    raise ValueError(f"The function passed to {name} uses a tensor of the "
                                     "outer graph; graphc's dataset functions cannot capture "
                                     f"tensors (build constants inside the function). ({e})"
                                     ) from None
                raise
            result = _lists_as_tuples(result)
            self.out_structure = structure.structure_of(result)
            self.outputs = [convert_to_tensor(v) for v in structure.flatten(result)]
        self.out_types = [t.dtype for t in self.outputs]
        self.out_shapes = [t.shape for t in self.outputs]
        self._exe = ReferenceExecutable(self.args, self.outputs, ())

    def __call__(self, flat_args, state):
        return self._exe.run(flat_args, state)


def _unpacks(arg_structure):
    """TF calls fn(*element) for a tuple element and fn(element) otherwise."""
    return isinstance(arg_structure, tuple) and not hasattr(arg_structure, "_fields")


def _lists_as_tuples(value):
    if isinstance(value, list):
        return tuple(_lists_as_tuples(v) for v in value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_lists_as_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _lists_as_tuples(v) for k, v in value.items()}
    return value


def check_predicate(fn):
    if len(fn.outputs) != 1 or fn.out_types[0] != dtypes.bool or fn.out_shapes[0].ndims not in (
            0, None):
        raise ValueError("`predicate` return type must be convertible to a scalar boolean "
                         f"tensor. Was {fn.out_types} with shapes {fn.out_shapes}.")
