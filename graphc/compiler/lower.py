"""Lowering: the part of a graphc Graph that one run signature needs -> an IR Module.

The op selection is the reference executor's (`prune` over `value_inputs`, fed tensors
cutting the graph), so a module computes exactly what ReferenceExecutable runs. As there,
a variable is read when its consumer runs (TF1's ref semantics): each consumer of a
VariableV2 output gets its own VariableV2 read node just before it, and a fetched
variable is read after everything else.

Unknown dims become symbols. A feed's unknown dim i is "<feed>.i". For every other op the
static shape comes from the graph; where the graph has an unknown dim, the op's own shape
inference is run again on stand-in inputs whose symbolic dims are replaced by distinct
large primes ("markers"): an output dim that comes back equal to a marker is that symbol
(elementwise ops, broadcasting with 1, matmul, reductions, reshape with -1 all trace
this way). The stand-ins' producers are stand-ins too (built when inference looks at
them), so shape tensors trace as well: Shape(x) reads as x's markers, and so do
fill(shape(x), v), reshape(g, shape(x)), random_uniform(shape(x)) and shape(x)[0].
Anything else gets a fresh symbol "sN". Symbols only claim equality of sizes, and the
interpreter checks every claim at run time.
"""
import itertools

from graphc import dtypes, errors
from graphc.compiler.ir import PARAMETER, Module
from graphc.framework.graph import Tensor, format_location
from graphc.reference_executor import prune

_module_counter = itertools.count(1)


def lower(feeds, fetches, targets, name=None):
    """Builds the Module for running `targets` and fetching `fetches` given `feeds`
    (graphc Tensors, Tensors, Operations: ReferenceExecutable's arguments)."""
    return _Lowering(list(feeds), list(fetches), list(targets), name).module


def _module_name(fetches, targets):
    first = (fetches or targets or [None])[0]
    label = getattr(getattr(first, "op", first), "name", "empty")
    return f"module_{next(_module_counter):04d}_" + "".join(
        c if c.isalnum() else "_" for c in label)


class _Lowering:
    def __init__(self, feeds, fetches, targets, name):
        self.module = Module(name or _module_name(fetches, targets))
        self.values = {}      # graphc Tensor -> ir Value
        self.nodes = {}       # graphc Operation -> ir Node
        self.symbols = _Symbols()
        self._stand_ins = {}  # graphc Tensor -> its stand-in
        fed = set(feeds)
        ops = [op for op in prune(fetches, targets, feeds)
               if not op.outputs or not all(t in fed for t in op.outputs)]
        _check_fed(ops)
        for i, t in enumerate(feeds):
            self._lower_feed(i, t)
        for op in ops:
            if op.type != "VariableV2":  # read where used, below
                self._lower_op(op)
        m = self.module
        end_reads = {}
        m.outputs = [self.values[t] if t in self.values else
                     end_reads.setdefault(t, self._read_variable(t)) for t in fetches]
        roots = [self.nodes[op] for op in targets if op in self.nodes]
        roots += [n for n in m.nodes if n.has_side_effect]
        m.roots = list(dict.fromkeys(roots))

    def _lower_feed(self, index, t):
        label = t.op.name if t.value_index == 0 else t.name
        shape = t.shape.as_tuple_or_none()
        dims = None if shape is None else tuple(
            self.symbols.named(f"{label}.{i}") if d is None else d for i, d in enumerate(shape))
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
                inputs.append(m.add_variable(v.name, t.dtype, self._graph_dims(t), v.location))
            elif t in self.values:
                inputs.append(self.values[t])
            else:
                inputs.append(reads.setdefault(t, self._read_variable(t)))
        out_types = [(t.dtype, d) for t, d in zip(op.outputs, self._output_dims(op, inputs))]
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
        dims = self._graph_dims(t)
        self.module.add_variable(var.name, t.dtype, dims, var.location)
        node = self.module.add_node("VariableV2", [], var.attrs, [(t.dtype, dims)], var.name,
                                    var.location)
        return node.outputs[0]

    def _graph_dims(self, t):
        shape = t.shape.as_tuple_or_none()
        return None if shape is None else tuple(
            self.symbols.fresh() if d is None else d for d in shape)

    def _output_dims(self, op, inputs):
        """Each output's dims: the graph's static shape, unknown dims traced to symbols."""
        shapes = [t.shape.as_tuple_or_none() for t in op.outputs]
        traced = None
        if any(s is not None and None in s for s in shapes):
            traced = self._trace(op, inputs)
        result = []
        for k, shape in enumerate(shapes):
            if shape is None:
                result.append(None)
                continue
            guess = traced[k] if traced is not None and len(traced[k] or ()) == len(shape) \
                else (None,) * len(shape)
            result.append(tuple(d if d is not None else self.symbols.of_marker(g)
                                for d, g in zip(shape, guess)))
        return result

    def _trace(self, op, inputs):
        """Reruns op's shape inference with markers for symbolic input dims; returns the
        inferred dims per output (tuples of int/None, or None), or None if it fails."""
        try:
            specs = op.op_def.infer([self.stand_in(t) for t in op.inputs], dict(op.attrs))
        except Exception:  # noqa: BLE001 - any failure just means "not traceable"
            return None
        if isinstance(specs, tuple) and len(specs) == 2 and isinstance(specs[1], dtypes.DType):
            specs = [specs]
        return [spec[0].as_tuple_or_none() for spec in specs]

    def stand_in(self, t):
        """t with markers for the symbolic dims of its IR value, made by a stand-in op."""
        s = self._stand_ins.get(t)
        if s is None:
            v = self.values.get(t)
            dims = v.dims if v is not None else None
            shape = t.shape if dims is None else \
                [d if isinstance(d, int) else self.symbols.marker(d) for d in dims]
            s = self._stand_ins[t] = Tensor(_StandInOp(t.op, self), t.value_index, shape,
                                            t.dtype)
        return s


class _StandInOp:
    """A graph op as shape inference sees it while tracing: its inputs are stand-ins."""

    def __init__(self, op, lowering):
        self._op = op
        self._lowering = lowering

    def __getattr__(self, name):
        return getattr(self._op, name)

    @property
    def inputs(self):
        return [self._lowering.stand_in(t) for t in self._op.inputs]


class _Symbols:
    """Symbol names and their markers (distinct primes no real dim is likely to equal)."""

    def __init__(self):
        self.by_marker = {}
        self.markers = {}
        self._primes = _primes_from(1_000_003)
        self._fresh = itertools.count(1)

    def named(self, name):
        self.marker(name)
        return name

    def fresh(self):
        return self.named(f"s{next(self._fresh)}")

    def marker(self, symbol):
        m = self.markers.get(symbol)
        if m is None:
            m = self.markers[symbol] = next(self._primes)
            self.by_marker[m] = symbol
        return m

    def of_marker(self, value):
        sym = self.by_marker.get(value)
        return sym if sym is not None else self.fresh()


def _primes_from(n):
    while True:
        if all(n % p for p in range(3, int(n ** 0.5) + 1, 2)) and n % 2:
            yield n
        n += 1


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

