"""TensorArray ops on the GPU (graphc/ops/tensor_array_ops.py: an array is its two flows,
values [size, *element] and written [size] bool), as grid-stride launches over the
elements they move, each thread taking consecutive ones:

  TensorArrayV3          both flows zeroed
  TensorArrayGatherV3    out[r] = values[indices[r]]
  TensorArrayScatterV3   every index checked; values' = values and written' = written
                         (copies, none where a loop writes the array in place); then
                         values'[indices[r]] = x[r], written'[indices[r]] = true (launches
                         after the copies: no barrier spans the grid)
  TensorArrayGatherGrad  out = 0 (or the sum it adds into, its 4th input, copied unless a
                         loop updates it in place), then out[indices[r]] += g[r] (atomic
                         adds in PTX: a gather may read one row twice)
  TensorArrayScatterGrad out = g (no copy in place), then the rows at the indices zeroed

with the reference kernels' checks, in their words (the CPU's, backends/cpu/
tensor_arrays.py), naming the op and the user's line; a thread whose index fails its
check moves nothing. Elements move in units of their dtype's size (every buffer is
aligned to it). Which arrays compile is graphc/compiler/regions.py's tensor_array_compiles.
"""
from contextlib import contextmanager

from llvmlite import ir

from graphc.compiler.backends.gpu.launches import LaunchLayout, blocks_for
from graphc.compiler.backends.gpu.loop import grid_stride_loop
from graphc.compiler.loops.tensor_array_grads import gather_grad_operands, scatter_grad_operands
from graphc.compiler.loops.views import LoweringError
from graphc.compiler.schedule.kernel import dims_equal
from kernels import dtypes as kd
from kernels.loops import I8, I32, I64

_READ_PAST = "Tried to read from index {0} but array size is: {1}"
_WRITE_PAST = "Tried to write to index {0} but array is not resizeable and size is: {1}"
_UNWRITTEN = ("Could not read from TensorArray index {0} because it has not yet been "
              "written to.")
_REWRITTEN = ("Could not write to TensorArray index {0} because it has already been "
              "written to.")
_FLOATS = {"float32": ir.FloatType(), "float64": ir.DoubleType()}


def tensor_array_launches(program, kernel, name, block, in_place=frozenset()):
    """The launches of a TensorArray kernel (module docstring); in_place: of a loop
    body, the loop variables it writes in the buffer it reads them from (a scatter into
    one copies nothing)."""
    node = kernel.main
    if node.type in _WRITES_ROWS:
        return _WRITES_ROWS[node.type](program, node, name, block, in_place)
    return _PLANS[node.type](program, node, name, block)


def _launch(name, emit, keys, elements, block, **details):
    launch = LaunchLayout(name, emit, None, [], list(dict.fromkeys(keys)),
                          blocks_for(elements, block), block)
    launch.details.update(details, keys=keys)
    return launch


def _sites(program, node, *messages):
    """{message: error site} of a launch's checks, made once (the launch is emitted twice:
    PTX and emulation)."""
    return {m: program.error_site(node, m, args=["int"] * m.count("{"))
            for m in messages}


def _count(dims):
    n = 1
    for d in dims:
        n = n * d
    return n


def _outputs(program, node, value):
    keys = program.stores_of(value)
    if not keys:
        raise LoweringError(f"{node.describe()} has no buffer")
    return keys


# ------------------------------------------------------------------------ plans
def _plan_create(program, node, name, block):
    stores = [(v, key) for v in node.outputs for key in program.stores_of(v)]
    return [_launch(f"{name}_{k}", _emit_zero, [key], _count(v.dims), block, value=v)
            for k, (v, key) in enumerate(stores)]


def _plan_gather(program, node, name, block):
    values, written, indices = node.inputs
    out = node.outputs[0]
    elem = out.dims[len(indices.dims):]
    if not dims_equal(elem, values.dims[1:]):
        raise LoweringError(f"{node.describe()} reads elements of dims {elem} from an array "
                            f"of dims {values.dims}")
    keys = [program.storage_of(v) for v in (values, written, indices)]
    outs = _outputs(program, node, out)
    rows, width = _count(indices.dims), _count(elem)
    sites = _sites(program, node, _READ_PAST, _UNWRITTEN)
    return [_launch(f"{name}_{k}", _emit_gather, keys + [key], rows * width, block,
                    rows=rows, width=width, size=values.dims[0], value=out,
                    check_written=not node.attrs["element_shape"].is_fully_defined(),
                    sites=sites)
            for k, key in enumerate(outs)]


def _plan_scatter(program, node, name, block, in_place):
    values, written, indices, x = node.inputs
    new_values, new_written = node.outputs
    rows = _count(indices.dims)
    if not dims_equal(x.dims[:1], (rows,)) or not dims_equal(x.dims[1:], values.dims[1:]) \
            or not dims_equal(new_values.dims, values.dims):
        raise LoweringError(f"{node.describe()} writes {x.dims} into {values.dims} at "
                            f"{indices.dims} indices")
    ins = [program.storage_of(v) for v in (values, written, indices, x)]
    width = _count(values.dims[1:])
    launches = [_launch(name + "_check", _emit_scatter_check, ins[1:3], rows, block,
                        rows=rows, size=values.dims[0],
                        sites=_sites(program, node, _WRITE_PAST, _REWRITTEN))]
    # each storage of the new flows: the old flow copied (unless it is that storage, as
    # for a loop variable written in place), then the rows written
    for k, key in enumerate(program.stores_of(new_values)):
        if not _same_buffer(key, ins[0], in_place):
            launches.append(_launch(f"{name}_values_{k}", _emit_copy, [key, ins[0]],
                                    _count(values.dims), block, value=values))
        launches.append(_launch(f"{name}_rows_{k}", _emit_scatter_rows,
                                [key, ins[2], ins[3]], rows * width, block, rows=rows,
                                width=width, size=values.dims[0], value=values))
    for k, key in enumerate(program.stores_of(new_written)):
        if not _same_buffer(key, ins[1], in_place):
            launches.append(_launch(f"{name}_written_{k}", _emit_copy, [key, ins[1]],
                                    values.dims[0], block, value=written))
        launches.append(_launch(f"{name}_mark_{k}", _emit_mark, [key, ins[2]], rows, block,
                                rows=rows, size=values.dims[0]))
    return launches


def _same_buffer(out, flow, in_place):
    """Whether a body's output `out` and its parameter `flow` are one buffer: loop
    variable j written in place (regions.written_in_place) is read as the body's
    parameter j and written as its output j."""
    return out == flow or (out[0] == "fetch" and flow == ("feed", out[1]) and
                           out[1] in in_place)


def _plan_gather_grad(program, node, name, block, in_place):
    g, indices, into, out = gather_grad_operands(node)
    ins = [program.storage_of(v) for v in (g, indices)]
    rows, width = _count(indices.dims), _count(out.dims[1:])
    sites = _sites(program, node, _READ_PAST)
    launches = []
    for k, key in enumerate(_outputs(program, node, out)):
        if into is None:
            launches.append(_launch(f"{name}_zero_{k}", _emit_zero, [key], _count(out.dims),
                                    block, value=out))
        elif not _same_buffer(key, program.storage_of(into), in_place):
            launches.append(_launch(f"{name}_copy_{k}", _emit_copy,
                                    [key, program.storage_of(into)], _count(out.dims), block,
                                    value=out))
        launches.append(_launch(f"{name}_add_{k}", _emit_gather_grad_add, [key] + ins,
                                rows * width, block, rows=rows, width=width,
                                size=out.dims[0], value=out, sites=sites))
    return launches


def _plan_scatter_grad(program, node, name, block, in_place):
    g, indices, out = scatter_grad_operands(node)
    ins = [program.storage_of(v) for v in (g, indices)]
    rows, width = _count(indices.dims), _count(out.dims[1:])
    launches = []
    for k, key in enumerate(_outputs(program, node, out)):
        if not _same_buffer(key, ins[0], in_place):
            launches.append(_launch(f"{name}_copy_{k}", _emit_copy, [key, ins[0]],
                                    _count(out.dims), block, value=out))
        launches.append(_launch(f"{name}_clear_{k}", _emit_clear_rows, [key, ins[1]],
                                rows * width, block, rows=rows, width=width,
                                size=out.dims[0], value=out))
    return launches


_PLANS = {"TensorArrayV3": _plan_create, "TensorArrayGatherV3": _plan_gather}
# the plans of kernels that may write a loop variable in the buffer they read it from
# (regions.written_in_place)
_WRITES_ROWS = {"TensorArrayScatterV3": _plan_scatter, "TensorArrayGatherGrad": _plan_gather_grad,
                "TensorArrayScatterGrad": _plan_scatter_grad}


# ---------------------------------------------------------------------- emitters
class _Launch:
    """A launch's emission: its buffers by storage key, its dims as i64, a grid-stride
    loop over n items, and failed checks reported through the status."""

    def __init__(self, t, program, layout):
        self.t, self.b, self.program, self.details = t, t.b, program, layout.details
        self.ptrs = dict(zip(layout.storages, t.args))
        self.buffers = [self.ptrs[key] for key in layout.details["keys"]]

    def dim(self, d):
        return self.program.emit_dim(self.b, d, self.t.syms)

    def items(self, tid, n):
        b = self.b
        first = b.add(b.mul(self.t.ctaid, self.t.ntid), tid)
        return grid_stride_loop(b, first, b.mul(self.t.ntid, self.t.nctaid), self.dim(n),
                                "item")

    def unit(self):
        """The integer type elements move as (their dtype's size)."""
        return ir.IntType(8 * kd.itemsize(self.details["value"].dtype.name))

    @contextmanager
    def indexed(self, indices, past=None):
        """The threads' grid-stride loop over the elements of the rows that `indices`
        names (details rows, width, size; no width: one element per row), entered as
        (k, i, at) for element k, of index r, at element `at` of the array's row
        i = indices[r], only where i is within the array's size. A row outside reports
        `past` where given (else an earlier launch checked it)."""
        b, d = self.b, self.details
        with self.t.threads() as tid:
            width = self.dim(d["width"]) if "width" in d else None
            size = self.dim(d["size"])
            with self.items(tid, d["rows"] * d.get("width", 1)) as k:
                r, c = (k, None) if width is None else (b.udiv(k, width), b.urem(k, width))
                i = self._index(indices, r)
                bad = self._outside(i, size)
                if past is not None:
                    self.fail_if(bad, past, [i, size])
                with b.if_then(b.not_(bad)):
                    yield k, i, (i if width is None else b.add(b.mul(i, width), c))

    def _index(self, indices, r):
        b = self.b
        return b.sext(b.load(b.gep(indices, [r], source_etype=I32), typ=I32), I64)

    def _outside(self, i, size):
        b = self.b
        return b.or_(b.icmp_signed("<", i, ir.Constant(I64, 0)), b.icmp_signed(">=", i, size))

    def fail_if(self, bad, message, values):
        """The thread reports the check's error site (first failure wins) when `bad`."""
        b = self.b
        site = self.details["sites"][message]
        status = b.select(bad, ir.Constant(I32, site + 1), ir.Constant(I32, 0))
        self.t.report_status(status, values, self.program.error_detail_base)

    def is_written(self, written, i):
        flag = self.b.load(self.b.gep(written, [i], source_etype=I8), typ=I8)
        return self.b.icmp_unsigned("!=", flag, ir.Constant(I8, 0))


def _emit_zero(t, program, layout, scalar_ops):
    e = _Launch(t, program, layout)
    unit = e.unit()
    with t.threads() as tid:
        with e.items(tid, _count(e.details["value"].dims)) as k:
            e.b.store(ir.Constant(unit, 0), e.b.gep(e.buffers[0], [k], source_etype=unit))


def _emit_copy(t, program, layout, scalar_ops):
    """dst = src, element by element (nothing where they are one buffer)."""
    e = _Launch(t, program, layout)
    b, unit = e.b, e.unit()
    dst, src = e.buffers
    with t.threads() as tid:
        with b.if_then(b.icmp_unsigned("!=", b.ptrtoint(dst, I64), b.ptrtoint(src, I64))):
            with e.items(tid, _count(e.details["value"].dims)) as k:
                b.store(b.load(b.gep(src, [k], source_etype=unit), typ=unit),
                        b.gep(dst, [k], source_etype=unit))


def _emit_gather(t, program, layout, scalar_ops):
    e = _Launch(t, program, layout)
    b, unit, d = e.b, e.unit(), e.details
    values, written, indices, out = e.buffers
    with e.indexed(indices, _READ_PAST) as (k, i, at):
        if d["check_written"]:
            e.fail_if(b.not_(e.is_written(written, i)), _UNWRITTEN, [i])
        src = b.gep(values, [at], source_etype=unit)
        b.store(b.load(src, typ=unit), b.gep(out, [k], source_etype=unit))


def _emit_scatter_check(t, program, layout, scalar_ops):
    e = _Launch(t, program, layout)
    written, indices = e.buffers
    with e.indexed(indices, _WRITE_PAST) as (_, i, _):
        e.fail_if(e.is_written(written, i), _REWRITTEN, [i])


def _emit_scatter_rows(t, program, layout, scalar_ops):
    e = _Launch(t, program, layout)
    b, unit = e.b, e.unit()
    out, indices, x = e.buffers
    with e.indexed(indices) as (k, _, at):  # the check launch failed the run
        dst = b.gep(out, [at], source_etype=unit)
        b.store(b.load(b.gep(x, [k], source_etype=unit), typ=unit), dst)


def _emit_mark(t, program, layout, scalar_ops):
    e = _Launch(t, program, layout)
    written, indices = e.buffers
    with e.indexed(indices) as (_, i, _):
        e.b.store(ir.Constant(I8, 1), e.b.gep(written, [i], source_etype=I8))


def _emit_gather_grad_add(t, program, layout, scalar_ops):
    e = _Launch(t, program, layout)
    b = e.b
    scalar = _FLOATS[e.details["value"].dtype.name]
    out, g, indices = e.buffers
    with e.indexed(indices, _READ_PAST) as (k, _, at):
        dst = b.gep(out, [at], source_etype=scalar)
        add = b.load(b.gep(g, [k], source_etype=scalar), typ=scalar)
        if t.nvptx:  # two rows of g may add into one row of out
            b.atomic_rmw("fadd", dst, add, "monotonic")
        else:  # the emulation runs one thread at a time
            b.store(b.fadd(b.load(dst, typ=scalar), add), dst)


def _emit_clear_rows(t, program, layout, scalar_ops):
    e = _Launch(t, program, layout)
    b, unit = e.b, e.unit()
    out, indices = e.buffers
    with e.indexed(indices) as (_, _, at):
        b.store(ir.Constant(unit, 0), b.gep(out, [at], source_etype=unit))
