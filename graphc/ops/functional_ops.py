"""map_fn, scan, foldl and foldr (tf.compat.v1) as while_loops over TensorArrays, as TF1
builds them: the elements are unstacked into TensorArrays, step i reads them, and
map_fn and scan write each step's result into output TensorArrays that are stacked after
the loop. Nested structures of elements, accumulators and outputs are supported."""
from graphc import dtypes
from graphc.framework import nest
from graphc.framework.graph import get_default_graph
from graphc.ops.tensor_array_ops import TensorArray

__all__ = ["map_fn", "scan", "foldl", "foldr"]


def _elements(elems):
    from graphc.ops.constant_ops import convert_to_tensor
    flat = [convert_to_tensor(e, name="elem") for e in nest.flatten(elems)]
    if not flat:
        raise ValueError("elems must not be empty")
    for e in flat:
        if e.shape.ndims == 0:
            raise ValueError(f"Elements in elems must be 1+ dimensional Tensors, not scalars: "
                             f"{e.name}")
    return flat


def _length(flat):
    from graphc.ops.array_ops import shape
    static = flat[0].shape[0].value if flat[0].shape.ndims else None
    return static, shape(flat[0])[0]


def _input_arrays(flat, n):
    from graphc.ops.array_ops import shape
    return [TensorArray(e.dtype, size=n, element_shape=e.shape[1:] if e.shape.ndims else None,
                        element_dims=shape(e)[1:] if e.shape.ndims else None,
                        name="elems_ta").unstack(e) for e in flat]


def _result_shapes(fn, elems, flat, count):
    """The static shapes of fn's results on one element, from fn traced on placeholders
    in a body of its own that is then dropped (as TF2 traces a function): a result array
    whose element shape is known before the loop compiles natively
    (graphc/compiler/regions.py). None for each when that trace fails: the loop's own
    trace then reports the error."""
    from graphc.ops.function_call import trace
    specs = [(e.shape[1:] if e.shape.ndims else None, e.dtype) for e in flat]
    g = get_default_graph()
    try:
        body, y = trace("map_shapes", lambda *x: fn(nest.pack_sequence_as(elems, list(x))),
                        specs)
    except (ValueError, TypeError):
        return [None] * count
    del g._functions[body.name]
    shapes = [getattr(t, "shape", None) for t in nest.flatten(y)]
    if len(shapes) != count:
        return [None] * count
    return [s if s is not None and s.is_fully_defined() else None for s in shapes]


def _stacked(ta, static_n, elem):
    """The stacked outputs, their static shape [n] + element shape; zero steps give an
    empty array of that shape when the element shape is known."""
    from graphc.ops.array_ops import concat, reshape
    out = ta.stack()
    if elem.is_fully_defined():
        out = reshape(out, concat([[-1], elem.as_list()], 0) if elem.ndims else [-1])
    if static_n is not None and out.shape.ndims:
        out.set_shape([static_n] + [None] * (out.shape.ndims - 1))
    return out


def map_fn(fn, elems, dtype=None, parallel_iterations=None, back_prop=True,
           swap_memory=False, infer_shape=True, name=None):
    """fn applied to each slice elems[i] (of every tensor of a nest of them); the results
    stacked. dtype gives the structure/dtypes of fn's result when it differs from elems'."""
    from graphc.ops.while_v2 import while_loop
    if not callable(fn):
        raise TypeError("fn must be callable.")
    g = get_default_graph()
    with g.name_scope(name or "map"):
        flat = _elements(elems)
        static_n, n = _length(flat)
        inputs = _input_arrays(flat, n)
        out_structure = elems if dtype is None else dtype
        out_dtypes = [e.dtype for e in flat] if dtype is None else \
            [dtypes.as_dtype(d) for d in nest.flatten(dtype)]
        known = _result_shapes(fn, elems, flat, len(out_dtypes)) if infer_shape else \
            [None] * len(out_dtypes)
        outputs = [TensorArray(d, size=n, infer_shape=infer_shape, element_shape=shape,
                               name="result_ta") for d, shape in zip(out_dtypes, known)]
        shapes = []  # of fn's results, known once the body is built

        def body(i, outs):
            x = nest.pack_sequence_as(elems, [ta.read(i) for ta in inputs])
            y = nest.flatten(fn(x))
            if len(y) != len(outs):
                raise ValueError(f"map_fn: fn returned {len(y)} tensors, the structure of "
                                 f"dtype has {len(outs)}")
            outs = [ta.write(i, v) for ta, v in zip(outs, y)]
            shapes.extend(ta.element_shape for ta in outs)
            return i + 1, outs

        from graphc.ops.math_ops import less
        # the trip count is n, known before the loop: as TF1, maximum_iterations says so,
        # which sizes the stacks a gradient keeps (graphc/compiler/regions.py)
        _, outputs = while_loop(lambda i, outs: less(i, n), body, [0, outputs],
                                parallel_iterations=parallel_iterations or 10,
                                back_prop=back_prop, maximum_iterations=n)
        return nest.pack_sequence_as(out_structure, [_stacked(ta, static_n, shape)
                                                     for ta, shape in zip(outputs, shapes)])


def _accumulate(fn, elems, initializer, reverse, keep_all, name, back_prop):
    """The loop of scan (keep_all: each step's accumulator stacked) and foldl/foldr."""
    from graphc.ops import math_ops
    from graphc.ops.constant_ops import convert_to_tensor
    from graphc.ops.while_v2 import while_loop
    if not callable(fn):
        raise TypeError("fn must be callable.")
    flat = _elements(elems)
    static_n, n = _length(flat)
    inputs = _input_arrays(flat, n)

    def read(i):
        return nest.pack_sequence_as(elems, [ta.read(i) for ta in inputs])

    def index(k):  # step k's element index
        return math_ops.subtract(math_ops.subtract(n, 1), k) if reverse else k
    if initializer is None:
        acc = read(index(0))
        start, structure = 1, elems
    else:
        acc = nest.map_structure(lambda a: convert_to_tensor(a), initializer)
        start, structure = 0, initializer
    flat_acc = nest.flatten(acc)
    outs = [TensorArray(a.dtype, size=n, element_shape=a.shape, name="result_ta")
            for a in flat_acc] if keep_all else []
    if keep_all and start == 1:
        outs = [ta.write(index(0), a) for ta, a in zip(outs, flat_acc)]

    def body(k, a, outs):
        new = fn(nest.pack_sequence_as(structure, a), read(index(k)))
        try:
            nest.assert_same_structure(structure, new)
        except ValueError as e:
            raise ValueError(f"fn must return the structure of the accumulator: {e}") from None
        new = [convert_to_tensor(v) for v in nest.flatten(new)]
        return k + 1, new, [ta.write(index(k), v) for ta, v in zip(outs, new)]

    _, final, outs = while_loop(lambda k, a, outs: math_ops.less(k, n), body,
                                [convert_to_tensor(start), flat_acc, outs],
                                back_prop=back_prop, maximum_iterations=n)  # as map_fn
    if keep_all:
        return nest.pack_sequence_as(structure, [_stacked(ta, static_n, a.shape)
                                                 for ta, a in zip(outs, flat_acc)])
    return nest.pack_sequence_as(structure, final)


def scan(fn, elems, initializer=None, parallel_iterations=10, back_prop=True,
         swap_memory=False, infer_shape=True, reverse=False, name=None):
    """a_i = fn(a_{i-1}, elems[i]) (from the end if reverse); returns all a_i stacked. Without
    an initializer a_0 is elems[0]."""
    with get_default_graph().name_scope(name or "scan"):
        return _accumulate(fn, elems, initializer, reverse, True, name, back_prop)


def foldl(fn, elems, initializer=None, parallel_iterations=10, back_prop=True,
          swap_memory=False, name=None):
    """fn(...fn(fn(initializer, elems[0]), elems[1])...): the last accumulator."""
    with get_default_graph().name_scope(name or "foldl"):
        return _accumulate(fn, elems, initializer, False, False, name, back_prop)


def foldr(fn, elems, initializer=None, parallel_iterations=10, back_prop=True,
          swap_memory=False, name=None):
    """foldl from the last element to the first."""
    with get_default_graph().name_scope(name or "foldr"):
        return _accumulate(fn, elems, initializer, True, False, name, back_prop)
