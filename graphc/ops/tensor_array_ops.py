"""TensorArray (tf.compat.v1.TensorArray) as values: no resource, two flow tensors.

A TensorArray is the pair of tensors (values [size, *element_shape], written [size]
bool); every write returns a new TensorArray holding new flows, as TF1's API already
demands (`ta = ta.write(...)`). That is what a while_loop threads through its loop
variables, what the reference executor holds (one dense array), and what the native
lowering will plan as one buffer. Three ops do the work:
  TensorArrayV3(size)                              -> (values of zeros, written = false)
  TensorArrayScatterV3(values, written, indices, x)-> rows `indices` of values := x
  TensorArrayGatherV3(values, written, indices)    -> rows `indices` of values
write/read/stack/unstack/gather/scatter/concat are made of them. As TF1: writing an index
twice, or past the size unless dynamic_size (which grows the array), is an error; so is
reading an index never written (unless the element shape is fully known: zeros); all
elements have one shape (infer_shape=True), merged into element_shape as they are
written. Differs from TF on purpose: clear_after_read is accepted but a read does not
clear the element (values are immutable here; reading an element twice is allowed).
Gradients: of a scatter, the rows gathered (and, for the old values, the gradient with
those rows zeroed); of a gather, the gradient scattered back (summed).
"""
import numpy as np

from graphc import dtypes, errors
from graphc.framework.op_def import register_gradient, register_op
from graphc.framework.static_value import constant_value, shape_from_tensor
from graphc.framework.tensor_shape import TensorShape, as_shape

__all__ = ["TensorArray"]


def _create_infer(inputs, a):
    from graphc.ops.array_ops import known_values
    n = known_values(inputs[0])  # a symbolic size (shape(x)[0] when compiling) stays one
    n = None if n is None or len(n) != 1 else n[0]
    # an array that grows (dynamic_size) has the size it is made with until written
    rows = TensorShape([n])
    elem = a["element_shape"]
    if len(inputs) > 1:  # the element's dims as a tensor: known when compiling
        given = known_values(inputs[1])
        if given is not None and elem.ndims == len(given):
            elem = TensorShape([e if e is not None else d
                                for e, d in zip(elem.as_list(), given)])
    values = rows.concatenate(elem) if elem.ndims is not None else TensorShape(None)
    return [(values, a["dtype"]), (rows, dtypes.bool)]


def _create_kernel(size, *element_dims, dtype, element_shape, dynamic_size):
    n = int(size)
    if n < 0:
        raise errors.KernelError(f"TensorArray size must be >= 0, got {n}")
    elem = [] if element_shape.ndims is None else \
        [0 if d is None else d for d in element_shape.as_list()]
    if element_dims:
        elem = [int(d) for d in np.reshape(element_dims[0], [-1])]
    return np.zeros([n] + elem, dtype.np), np.zeros([n], bool)


# host-only but for the CPU's code (graphc/compiler/backends/cpu/tensor_arrays.py), as the
# loops that carry them (while_v2.py)
register_op("TensorArrayV3", infer=_create_infer, kernel=_create_kernel, kind="opaque", host_only=True)


def _elements(values):
    return values[1:] if values.ndims is not None else TensorShape(None)


def _rows(values, written):
    """The size of an array that does not grow. The written flow holds it even when the
    values' rank is unknown (an array made without element_shape): the rows of an
    unstack into such an array are then known before it runs."""
    rows = TensorShape([None])
    for flow in (values, written):
        if flow.ndims is not None:
            rows = rows.merge_with(flow[:1])
    return rows


def _scatter_infer(inputs, a):
    values, written, indices, x = inputs
    if x.dtype != values.dtype:
        raise TypeError(f"TensorArray dtype is {values.dtype.name} but Op is trying to write "
                        f"dtype {x.dtype.name}")
    elem = _elements(values.shape)
    given = x.shape[1:] if x.shape.ndims is not None else TensorShape(None)
    if not elem.is_compatible_with(given):
        raise ValueError(f"Inconsistent shapes: saw {given} but expected {elem}")
    elem = elem.merge_with(given)
    rows = TensorShape([None]) if a["dynamic_size"] else _rows(values.shape, written.shape)
    out = rows.concatenate(elem) if elem.ndims is not None else TensorShape(None)
    return [(out, values.dtype), (rows, dtypes.bool)]


def _scatter_kernel(values, written, indices, x, dynamic_size):
    indices = np.asarray(indices).reshape(-1)
    x = np.asarray(x)
    if x.shape[:1] != (len(indices),):
        raise errors.KernelError(f"Expected len(indices) == values.shape[0], but saw: "
                                 f"{len(indices)} vs. {x.shape[0] if x.ndim else 'a scalar'}")
    elem = x.shape[1:]
    if values.shape[1:] != elem:
        if written.any():
            raise errors.KernelError(
                f"Could not write to TensorArray because the value shape is {list(elem)} "
                f"which is incompatible with the TensorArray's inferred element shape: "
                f"{list(values.shape[1:])}")
        values = np.zeros((values.shape[0],) + elem, values.dtype)
    size = values.shape[0]
    if len(indices) and (indices.min() < 0 or (indices.max() >= size and not dynamic_size)):
        bad = int(indices.min()) if indices.min() < 0 else int(indices.max())
        raise errors.KernelError(f"Tried to write to index {bad} but array is not resizeable "
                                 f"and size is: {size}")
    if len(indices) and indices.max() >= size:
        grow = int(indices.max()) + 1 - size
        values = np.concatenate([values, np.zeros((grow,) + elem, values.dtype)])
        written = np.concatenate([written, np.zeros(grow, bool)])
    for i in indices:
        if written[i]:
            raise errors.KernelError(f"Could not write to TensorArray index {int(i)} because "
                                     "it has already been written to.")
    values, written = values.copy(), written.copy()
    values[indices] = x
    written[indices] = True
    return values, written


register_op("TensorArrayScatterV3", infer=_scatter_infer, kernel=_scatter_kernel,
            kind="opaque", host_only=True)


def _gather_infer(inputs, a):
    values, written, indices = inputs
    elem = a["element_shape"].merge_with(_elements(values.shape)) \
        if a["element_shape"].ndims is not None else _elements(values.shape)
    if indices.shape.ndims is None or elem.ndims is None:
        return TensorShape(None), values.dtype
    return indices.shape.concatenate(elem), values.dtype


def _gather_kernel(values, written, indices, element_shape):
    indices = np.asarray(indices)
    flat = indices.reshape(-1)
    size = values.shape[0]
    for i in flat:
        if i < 0 or i >= size:
            raise errors.KernelError(f"Tried to read from index {int(i)} but array size is: "
                                     f"{size}")
        if not written[i] and not element_shape.is_fully_defined():
            raise errors.KernelError(f"Could not read from TensorArray index {int(i)} because "
                                     "it has not yet been written to.")
    return values[flat].reshape(indices.shape + values.shape[1:])


register_op("TensorArrayGatherV3", infer=_gather_infer, kernel=_gather_kernel,
            kind="opaque", host_only=True)


def _scatter_grad_kernel(g, old_rows, indices):
    """The gradient of a scatter's old values: the rows it overwrote get none, the rows a
    dynamic_size array grew by are not its. Old values never written (zeros of no element
    shape yet) come from TensorArrayV3, which takes no gradient: they get the element
    shape of g, so that a loop's saved values keep one shape every iteration."""
    rows = int(np.asarray(old_rows).reshape(-1)[0])
    out = np.array(g[:rows])
    indices = np.asarray(indices).reshape(-1)
    out[indices[indices < rows]] = 0
    return out


def _scatter_grad_infer(inputs, a):
    g, old_rows, _ = inputs
    rows = shape_from_tensor(old_rows)
    if g.shape.ndims is None or rows.ndims != 1:
        return TensorShape(None), g.dtype
    return rows.concatenate(g.shape[1:]), g.dtype


# host-only but for the CPU's code (backends/cpu/tensor_arrays.py), as the array ops
register_op("TensorArrayScatterGrad", infer=_scatter_grad_infer,
            kernel=_scatter_grad_kernel, kind="opaque", host_only=True)


def _gather_grad_kernel(g, shape, indices, into=None):
    """The gradient of a gather's values: g's rows added at the indices it read, into
    zeros or into `into` (a loop's sum of the gradients of its earlier iterations:
    accumulated_read_gradient)."""
    shape = tuple(int(d) for d in shape)
    out = np.zeros(shape, g.dtype) if into is None else np.array(into, g.dtype)
    if out.shape != shape:
        raise errors.KernelError(f"the gradient of a TensorArray of shape {list(shape)} is "
                                 f"added to one of shape {list(out.shape)}")
    flat = np.asarray(indices).reshape(-1)
    np.add.at(out, flat, g.reshape((len(flat),) + out.shape[1:]))
    return out


def _gather_grad_infer(inputs, a):
    g, shape, indices = inputs[:3]
    out = shape_from_tensor(shape)
    if out.ndims is not None and g.shape.ndims is not None and \
            indices.shape.ndims is not None and out.ndims >= 1:
        out = out[:1].concatenate(out[1:].merge_with(g.shape[indices.shape.ndims:]))
    return out, g.dtype


register_op("TensorArrayGatherGrad", infer=_gather_grad_infer,
            kernel=_gather_grad_kernel, kind="opaque", host_only=True)


def _forward_shape(t):
    """Shape of t computed where t is (a loop body then saves the small shape for the
    gradient, not t itself)."""
    from graphc.ops.array_ops import shape
    with t.graph._as_builder():
        return shape(t)


@register_gradient("TensorArrayScatterV3")
def _scatter_grad(op, g_values, g_written):
    from graphc.ops.array_ops import gather, reshape, shape
    values, _, indices, x = op.inputs
    if g_values is None:
        return [None, None, None, None]
    from graphc.gradients import input_needed
    gx = reshape(gather(g_values, reshape(indices, [-1])), _forward_shape(x))
    if not input_needed(values):
        # an array a loop appends to (while_v2's backward body reads the gradient of its
        # write only): no gradient of its old values, nor their rows saved each iteration
        return [None, None, None, gx]
    # an array of one size keeps its rows: the gradient's own shape says how many, and
    # no shape is saved from each iteration of a loop
    rows = _forward_shape(op.inputs[1]) if op.attrs["dynamic_size"] else shape(g_values)[:1]
    # after gx's read of g_values: a native loop then zeroes the written rows in g_values'
    # own buffer (control_flow.written_in_place) instead of copying all of it each step
    with g_values.graph.control_dependencies([gx.op]):
        g = g_values.graph.create_op("TensorArrayScatterGrad",
                                     [g_values, rows, indices]).outputs[0]
    return [g, None, None, gx]


@register_gradient("TensorArrayGatherV3")
def _gather_grad(op, grad):
    values, _, indices = op.inputs
    g = grad.graph.create_op("TensorArrayGatherGrad",
                             [grad, _forward_shape(values), indices]).outputs[0]
    g.set_shape(values.shape)
    return [g, None, None]


def accumulated_read_gradient(acc, grad):
    """acc + grad, where grad may be the gradient of reads of a TensorArray (a
    TensorArrayGatherGrad, or the AddN of several): their rows are then added into acc
    rather than into an array of zeros that is then added to acc. A backward loop sums
    the gradient of the array its body reads this way, each iteration touching the rows
    it read instead of the whole array (O(T) over T iterations, not O(T^2))."""
    from graphc.ops import math_ops
    parts = list(grad.op.inputs) if grad.op.type == "AddN" else [grad]
    if not all(p.op.type == "TensorArrayGatherGrad" and len(p.op.inputs) == 3 and
               p.dtype == acc.dtype and p.shape.is_compatible_with(acc.shape)
               for p in parts):
        return math_ops.add(acc, grad)
    for p in parts:
        g, shape, indices = p.op.inputs
        acc = acc.graph.create_op("TensorArrayGatherGrad",
                                  [g, shape, indices, acc]).outputs[0]
    return acc


from graphc.framework.op_def import not_differentiable  # noqa: E402

not_differentiable("TensorArrayV3", "TensorArrayScatterGrad", "TensorArrayGatherGrad")


class TensorArray:
    """tf.compat.v1.TensorArray: a list of same-shaped tensors, written once each."""

    def __init__(self, dtype, size=None, dynamic_size=None, clear_after_read=None,
                 tensor_array_name=None, handle=None, flow=None, infer_shape=True,
                 element_shape=None, colocate_with_first_write_call=True, name=None,
                 element_dims=None):
        """element_dims (graphc's own, not TF's): a 1-D int tensor of the element's dims,
        for an element_shape with dims known only at run time (dynamic_rnn's batch): the
        array then has its full shape from the start, as native code needs."""
        from graphc.ops.constant_ops import convert_to_tensor
        self._dtype = dtypes.as_dtype(dtype)
        self._dynamic_size = bool(dynamic_size)
        self._clear_after_read = True if clear_after_read is None else clear_after_read
        self._element_shape = as_shape(element_shape) if element_shape is not None \
            else TensorShape(None)
        self._infer_shape = infer_shape
        if flow is not None:
            self._flows = list(flow)
            return
        if size is None:
            raise ValueError("Size must be provided if handle is not provided")
        size = convert_to_tensor(size, dtype=dtypes.int32, name="size")
        inputs = [size]
        if element_dims is not None and self._element_shape.ndims is not None and \
                not self._element_shape.is_fully_defined():
            inputs.append(convert_to_tensor(element_dims, dtype=dtypes.int32,
                                            name="element_dims"))
        op = size.graph.create_op("TensorArrayV3", inputs,
                                  {"dtype": self._dtype, "element_shape": self._element_shape,
                                   "dynamic_size": self._dynamic_size},
                                  name or tensor_array_name or "TensorArray")
        self._flows = list(op.outputs)

    dtype = property(lambda self: self._dtype)
    dynamic_size = property(lambda self: self._dynamic_size)
    flows = property(lambda self: list(self._flows))
    flow = property(lambda self: self._flows[0])
    handle = flow

    @property
    def element_shape(self):
        values = self._flows[0].shape
        known = values[1:] if values.ndims is not None else TensorShape(None)
        if self._element_shape.ndims is None:
            return known
        return self._element_shape.merge_with(known) if known.ndims is not None \
            else self._element_shape

    def with_flows(self, flows):
        """This TensorArray's configuration on other flow tensors (a loop's)."""
        ta = TensorArray(self._dtype, dynamic_size=self._dynamic_size,
                         clear_after_read=self._clear_after_read, flow=flows,
                         infer_shape=self._infer_shape, element_shape=self.element_shape)
        return ta

    def flow_invariants(self):
        elem = self.element_shape
        values = TensorShape([None]).concatenate(elem) if elem.ndims is not None \
            else TensorShape(None)
        return [values, TensorShape([None])]

    def identity(self):
        return self

    def size(self, name=None):
        from graphc.ops.array_ops import shape
        return shape(self._flows[0], name=name or "TensorArraySize")[0] \
            if self._flows[0].shape.ndims is not None else \
            shape(self._flows[1], name=name or "TensorArraySize")[0]

    def scatter(self, indices, value, name=None):
        from graphc.ops.constant_ops import convert_to_tensor
        indices = convert_to_tensor(indices, dtype=dtypes.int32)
        value = convert_to_tensor(value, dtype=self._dtype)
        values, written = self._flows_shaped_by(value)
        op = values.graph.create_op("TensorArrayScatterV3", [values, written, indices, value],
                                    {"dynamic_size": self._dynamic_size},
                                    name or "TensorArrayScatter")
        return self.with_flows(op.outputs)

    def _flows_shaped_by(self, value):
        """The flows to write `value`'s rows into. An array made without element_shape
        takes its shape from its first write (TF1's infer_shape), as the reference's
        scatter does when it runs; made anew here with that shape, its values have dims
        before the run, which compiled code (and an exported file) needs."""
        from graphc.ops.array_ops import shape
        values, written = self._flows
        if values.shape.ndims is not None or values.op.type != "TensorArrayV3" or \
                value.shape.ndims is None or value.shape.ndims == 0:
            return self._flows
        create = values.op
        elem = value.shape[1:]
        fresh = TensorArray(self._dtype, size=create.inputs[0],
                            dynamic_size=create.attrs["dynamic_size"], element_shape=elem,
                            element_dims=None if elem.is_fully_defined() else shape(value)[1:],
                            name=create.name)
        return fresh._flows

    def write(self, index, value, name=None):
        from graphc.ops.array_ops import expand_dims, reshape
        from graphc.ops.constant_ops import convert_to_tensor
        index = convert_to_tensor(index, dtype=dtypes.int32)
        value = convert_to_tensor(value, dtype=self._dtype)
        if not self.element_shape.is_compatible_with(value.shape):
            raise ValueError(f"Inconsistent shapes: saw {value.shape} but expected "
                             f"{self.element_shape} (TensorArray element shape)")
        return self.scatter(reshape(index, [1]), expand_dims(value, 0), name=name or
                            "TensorArrayWrite")

    def gather(self, indices, name=None):
        from graphc.ops.constant_ops import convert_to_tensor
        indices = convert_to_tensor(indices, dtype=dtypes.int32)
        values, written = self._flows
        return values.graph.create_op("TensorArrayGatherV3", [values, written, indices],
                                      {"element_shape": self.element_shape},
                                      name or "TensorArrayGather").outputs[0]

    def read(self, index, name=None):
        from graphc.ops.array_ops import reshape
        from graphc.ops.constant_ops import convert_to_tensor
        index = convert_to_tensor(index, dtype=dtypes.int32)
        out = reshape(self.gather(reshape(index, [1])), self._read_shape())
        out.set_shape(self.element_shape)
        return out

    def _read_shape(self):
        from graphc.ops.array_ops import shape
        values = self._flows[0]
        return shape(values)[1:]

    def stack(self, name=None):
        from graphc.ops.array_ops import range as range_
        return self.gather(range_(0, self.size()), name=name or "TensorArrayStack")

    def unstack(self, value, name=None):
        from graphc.ops.array_ops import shape
        from graphc.ops.constant_ops import convert_to_tensor
        from graphc.ops.array_ops import range as range_
        value = convert_to_tensor(value, dtype=self._dtype)
        return self.scatter(range_(0, shape(value)[0]), value, name=name or
                            "TensorArrayUnstack")

    def concat(self, name=None):
        from graphc.ops.array_ops import concat, reshape, shape
        stacked = self.stack()
        if stacked.shape.ndims is not None and stacked.shape.ndims < 2:
            raise ValueError("Concatenating scalars in TensorArray is unsupported")
        dims = shape(stacked)
        return reshape(stacked, concat([[-1], dims[2:]], 0), name=name or "TensorArrayConcat")

    def close(self, name=None):
        from graphc.ops.control_flow_ops import no_op
        return no_op(name=name or "TensorArrayClose")

    def grad(self, source, flow=None, name=None):
        raise NotImplementedError("TensorArray.grad: gradients of TensorArrays come from "
                                  "gc.gradients (no gradient arrays by hand in graphc)")
