"""Lowering: the part of a graphc Graph that one run signature needs -> an IR Module.

The op selection is the reference executor's (`prune` over `value_inputs`, fed tensors
cutting the graph), so a module computes exactly what ReferenceExecutable runs. As there,
a variable is read when its consumer runs (TF1's ref semantics): each consumer of a
VariableV2 output gets its own VariableV2 read node just before it, and a fetched
variable is read after everything else.

Shapes are symbolic (graphc/framework/symbolic.py). Unknown dim i of feed x becomes the
symbol `x.i`, whose hint is its size in this run's feeds (a size of 0 or 1 is specialized
to that int instead: broadcasting and empty tensors behave differently); a feed of unknown
rank takes the rank of the fed array. Every op's own shape inference then runs again on
stand-in inputs whose shapes hold those SymDims, so each IR dim is an int or an
expression of the feed symbols. The stand-ins' producers are stand-ins too (built when
inference looks at them), so shape tensors trace as well: Shape(x) reads as x's dims, and
so do fill(shape(x), v), reshape(g, shape(x)), random_uniform(shape(x)), shape(x)[0].
Decisions inference takes on the hints are recorded in `module.guards`; the module is
valid for every feed whose dims satisfy them (`check_guards`). A dim that depends on data
(Where's row count) stays None and makes the module not static-shaped.
"""
import itertools

from graphc import dtypes, errors
from graphc.compiler.ir import PARAMETER, Module
from graphc.framework.graph import Tensor, format_location
from graphc.framework.symbolic import GuardSet, SymDim, concrete
from graphc.framework.tensor_shape import TensorShape
from graphc.reference_executor import op_error, prune

_module_counter = itertools.count(1)


def lower(feeds, fetches, targets, feed_shapes, name=None):
    """Builds the Module for running `targets` and fetching `fetches` given `feeds`
    (graphc Tensors, Tensors, Operations: ReferenceExecutable's arguments).

    feed_shapes: the shapes of the arrays fed in the run being compiled, one per feed;
    they give the symbols' hints and the ranks of feeds of unknown rank."""
    feeds, feed_shapes = list(feeds), [tuple(s) for s in feed_shapes]
    if len(feeds) != len(feed_shapes):
        raise ValueError(f"lower: {len(feeds)} feeds but {len(feed_shapes)} feed shapes")
    return _Lowering(feeds, list(fetches), list(targets), feed_shapes, name).module


def signature_key(feeds, fetches, targets, feed_arrays):
    """The cache key of a run: what it feeds, fetches and runs, and the fed arrays' dtypes
    and ranks. Runs with one key differ only in dim sizes, which the guards decide."""
    return (tuple(feeds), tuple(fetches), tuple(targets),
            tuple(a.dtype.str for a in feed_arrays), tuple(a.ndim for a in feed_arrays))


def _module_name(fetches, targets):
    first = (fetches or targets or [None])[0]
    label = getattr(getattr(first, "op", first), "name", "empty")
    return f"module_{next(_module_counter):04d}_" + "".join(
        c if c.isalnum() else "_" for c in label)


class _Lowering:
    def __init__(self, feeds, fetches, targets, feed_shapes, name):
        self.module = m = Module(name or _module_name(fetches, targets))
        self.values = {}      # graphc Tensor -> ir Value
        self.nodes = {}       # graphc Operation -> ir Node
        self._stand_ins = {}  # hints? -> {graphc Tensor: its stand-in}
        self.fed = set(feeds)
        ops = [op for op in prune(fetches, targets, feeds)
               if not op.outputs or not all(t in self.fed for t in op.outputs)]
        _check_fed(ops)
        with GuardSet() as guards:
            for i, (t, shape) in enumerate(zip(feeds, feed_shapes)):
                self._lower_feed(i, t, shape, guards)
            for op in ops:
                if op.type != "VariableV2":  # read where used, below
                    self._lower_op(op)
            end_reads = {}
            m.outputs = [self.values[t] if t in self.values else
                         end_reads.setdefault(t, self._read_variable(t)) for t in fetches]
        m.guards = list(guards.guards)
        roots = [self.nodes[op] for op in targets if op in self.nodes]
        roots += [n for n in m.nodes if n.has_side_effect]
        m.roots = list(dict.fromkeys(roots))

    def _lower_feed(self, index, t, shape, guards):
        label = t.op.name if t.value_index == 0 else t.name
        static = t.shape.as_tuple_or_none()
        if static is None:
            static = (None,) * len(shape)
        if len(static) != len(shape) or any(s is not None and s != n
                                            for s, n in zip(static, shape)):
            raise ValueError(f"Cannot feed value of shape {shape} for Tensor '{t.name}', "
                             f"which has shape '{t.shape}'")
        dims = []
        for axis, (s, n) in enumerate(zip(static, shape)):
            if s is not None:
                dims.append(s)
                continue
            sym = SymDim.symbol(f"{label}.{axis}", n)
            self.module.symbols[f"{label}.{axis}"] = (index, axis)
            if n in (0, 1):  # specialized: size-1 dims broadcast, empty ones skip work
                guards.record(sym, "==", n, True)
                dims.append(n)
            else:
                dims.append(sym)
        node = self.module.add_node(PARAMETER, [], {"index": index}, [(t.dtype, dims)], t.name,
                                    t.op.location)
        self.values[t] = node.outputs[0]

    def _lower_op(self, op):
        m = self.module
        refs = op.op_def.ref_inputs
        inputs = []
        reads = {}
        for j, t in enumerate(op.inputs):
            if j in refs:
                v = t.op
                inputs.append(m.add_variable(v.name, t.dtype, _graph_dims(t), v.location))
            elif t in self.values:
                inputs.append(self.values[t])
            else:
                inputs.append(reads.setdefault(t, self._read_variable(t)))
        out_types = [(t.dtype, d) for t, d in zip(op.outputs, self._output_dims(op))]
        fwd = op.forward_op
        node = m.add_node(op.type, inputs, op.attrs, out_types, op.name, op.location,
                          None if fwd is None else (fwd.name, fwd.type, fwd.location),
                          [self.nodes[c] for c in op.control_inputs if c in self.nodes])
        self.nodes[op] = node
        for t, v in zip(op.outputs, node.outputs):
            self.values.setdefault(t, v)   # a fed output keeps its Parameter

    def _read_variable(self, t):
        """A VariableV2 node reading t's variable now (appended to the module)."""
        var = t.op
        dims = _graph_dims(t)
        self.module.add_variable(var.name, t.dtype, dims, var.location)
        node = self.module.add_node("VariableV2", [], var.attrs, [(t.dtype, dims)], var.name,
                                    var.location)
        return node.outputs[0]

    def _output_dims(self, op):
        """Each output's dims from op's shape inference on symbolic stand-in inputs."""
        try:
            specs = op.op_def.infer([self.stand_in(t) for t in op.inputs], dict(op.attrs))
        except ValueError as e:  # impossible for this run's feeds, e.g. a reshape's size
            raise op_error(op, self._concrete_message(op, e)) from None
        if isinstance(specs, tuple) and len(specs) == 2 and isinstance(specs[1], dtypes.DType):
            specs = [specs]
        return [_merge_dims(spec[0], t.shape) for spec, t in zip(specs, op.outputs)]

    def _concrete_message(self, op, error):
        """The error inference gives with this run's sizes in place of the symbols (the
        numbers the user fed), or the symbolic one if that does not fail the same way."""
        with GuardSet():  # decisions taken here guard nothing
            try:
                op.op_def.infer([self.stand_in(t, True) for t in op.inputs], dict(op.attrs))
            except ValueError as e:
                return str(e)
        return str(error)

    def stand_in(self, t, hints=False):
        """A Tensor like t whose shape holds its IR dims (SymDims, or with `hints` their
        sizes in this run), made by a stand-in op."""
        cache = self._stand_ins.setdefault(hints, {})
        s = cache.get(t)
        if s is None:
            v = self.values.get(t)
            shape = t.shape if v is None else TensorShape(
                v.dims if v.dims is None or not hints else
                [d.hint if isinstance(d, SymDim) else d for d in v.dims])
            s = cache[t] = Tensor(_StandInOp(t.op, self, t in self.fed, hints),
                                  t.value_index, shape, t.dtype)
        return s


class _StandInOp:
    """A graph op as shape inference sees it while lowering: its inputs are stand-ins. The
    producer of a fed tensor looks like a Placeholder: its value is the feed, not its own."""

    def __init__(self, op, lowering, fed, hints):
        self._op = op
        self._lowering = lowering
        self._fed = fed
        self._hints = hints

    def __getattr__(self, name):
        return getattr(self._op, name)

    @property
    def type(self):
        return "Placeholder" if self._fed else self._op.type

    @property
    def inputs(self):
        return [] if self._fed else [self._lowering.stand_in(t, self._hints)
                                     for t in self._op.inputs]


def _merge_dims(inferred, graph_shape):
    """The inferred dims, with the graph's static dims where inference knows less (a
    set_shape, an op whose inference cannot see through its shape tensor)."""
    dims = inferred.as_tuple_or_none()
    static = graph_shape.as_tuple_or_none()
    if dims is None:
        return static
    if static is None or len(static) != len(dims):
        return tuple(concrete(d) for d in dims)
    out = []
    for d, s in zip(dims, static):
        d = concrete(d)
        if d is None or (isinstance(d, SymDim) and s is not None and d == s):  # guarded
            d = s
        out.append(d)
    return tuple(out)


def _graph_dims(t):
    return t.shape.as_tuple_or_none()


def _check_fed(ops):
    """The reference executor's error for an unfed placeholder, raised while lowering."""
    for op in ops:
        if op.type == "Placeholder":
            shape = op.attrs["shape"]
            dims = "<unknown>" if shape.ndims is None else \
                "[" + ",".join("?" if d.value is None else str(d.value) for d in shape) + "]"
            raise errors.InvalidArgumentError(
                None, op, f"You must feed a value for placeholder tensor '{op.name}' with "
                          f"dtype {op.attrs['dtype'].name} and shape {dims}\n\t [[node "
                          f"{op.name} (defined at {format_location(op.location)})]]")
