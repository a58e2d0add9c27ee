"""Nested element structures of tf.data (tuples and dicts of components), as tf.nest.

Inside a pipeline elements travel flat (a list of arrays, one per component); the
structure is kept once per dataset and used only to pack what the user sees.
Dicts flatten in sorted key order, tuples in order; lists are values, not structures
(TF converts a list to one tensor).
"""
import numpy as np

from graphc import dtypes
from graphc.framework.graph import Tensor
from graphc.framework.tensor_shape import TensorShape
from graphc.ops.constant_ops import to_numpy

LEAF = None  # the structure of a single component


def flatten(value):
    if isinstance(value, dict):
        return [x for k in sorted(value) for x in flatten(value[k])]
    if isinstance(value, tuple):
        return [x for v in value for x in flatten(v)]
    return [value]


def structure_of(value):
    """The shape of the nesting alone (leaves replaced by LEAF)."""
    if isinstance(value, dict):
        return {k: structure_of(v) for k, v in value.items()}
    if isinstance(value, tuple):
        items = tuple(structure_of(v) for v in value)
        return type(value)(*items) if hasattr(value, "_fields") else items
    return LEAF


def pack(structure, flat):
    """Rebuilds `structure` with the leaves taken in order from `flat`."""
    flat = list(flat)
    out, rest = _pack(structure, flat)
    if rest:
        raise ValueError(f"{len(rest)} values left over when packing into {structure!r}")
    return out


def _pack(s, flat):
    if isinstance(s, dict):
        out = {}
        for k in sorted(s):
            out[k], flat = _pack(s[k], flat)
        return {k: out[k] for k in s}, flat
    if isinstance(s, tuple):
        items = []
        for v in s:
            item, flat = _pack(v, flat)
            items.append(item)
        return (type(s)(*items) if hasattr(s, "_fields") else tuple(items)), flat
    return flat[0], flat[1:]


def as_component(value):
    """A leaf given by the user: a Tensor stays symbolic (captured), anything else becomes
    an array with TF's dtype rules (Python floats are float32, NumPy keeps its dtype)."""
    if hasattr(value, "_as_tensor"):
        value = value._as_tensor()
    if isinstance(value, Tensor):
        return value
    if isinstance(value, list) and any(isinstance(v, Tensor) for v in flatten_list(value)):
        from graphc.ops.constant_ops import convert_to_tensor
        return convert_to_tensor(value)
    arr = to_numpy(value)
    arr.setflags(write=False)
    return arr


def flatten_list(values):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from flatten_list(v)
        else:
            yield v


def component_spec(leaf):
    """(DType, TensorShape) of a Tensor or array component."""
    if isinstance(leaf, Tensor):
        return leaf.dtype, leaf.shape
    return dtypes.as_dtype(leaf.dtype), TensorShape(leaf.shape)


def check_same_types(a_types, b_types, what):
    if [t.name for t in a_types] != [t.name for t in b_types]:
        raise TypeError(f"{what}: component types differ: "
                        f"{[t.name for t in a_types]} vs {[t.name for t in b_types]}")


def stack_components(elements, n_components):
    """Stacks a list of flat elements into one flat batch; all elements of a component must
    have the same shape (InvalidArgumentError at run time otherwise, as TF's batch)."""
    from graphc import errors
    out = []
    for c in range(n_components):
        parts = [e[c] for e in elements]
        first = np.shape(parts[0])
        for i, p in enumerate(parts[1:], 1):
            if np.shape(p) != first:
                raise errors.KernelError(
                    f"Cannot batch tensors with different shapes in component {c}. First "
                    f"element had shape {list(first)} and element {i} had shape "
                    f"{list(np.shape(p))}.")
        out.append(np.stack(parts))
    return out
