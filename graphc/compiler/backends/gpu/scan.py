"""The scan template: Cumsum by blocks, one block per scanned line.

A Cumsum's lines (the output's elements along the scan axis, one line per index of the
other dims) are independent. Each block takes lines ctaid, ctaid + nctaid, ... and scans
a line in chunks of its ntid elements, element j = chunk start + tid of the line in
thread tid (the element `size - 1 - j` when `reverse`, as the CPU template indexes it):

    threads: carry := the identity at the line's first chunk (a private slot: every
             thread holds the same running total of the chunks before)
             mine := x[j] (the identity past the line's end)
    warp:    for k = 1, 2, 4, 8, 16: shuffle up by k (shfl.sync.up; t.shuffle_up)
                threads: lane >= k: mine := shuffled + mine   (Kogge-Stone: each lane
                         now holds the inclusive sum of its warp's lanes up to it)
             then (in the last of these regions) the warp's last lane writes its total
             to shared totals[half][warp]
    exclusive: shuffle up by 1: below := the lane below's sum (unused in lane 0)
    barrier
    threads: prefix := carry + totals[half][0 .. warp - 1] (left to right)
             out[j] := prefix + mine  (exclusive: prefix + the lane below's, or prefix)
             carry := prefix + totals[half][warp ..]   (the same sum in every thread)

So a chunk costs one barrier: the warp totals are double-buffered (`half`: the parity of
the block's chunk count, running on from line to line), so the next chunk writes the
other half while slow threads still read this one, and a chunk two on writes this half
only after the next chunk's barrier, which every thread reaches after reading it. The
launch's block is the line length rounded up to warps, at most the codegen's block.
Blocks that are not a multiple of 32 (down to one thread) need nothing more: a shuffle
up reads lower lanes only, which exist in a partial warp; its last lane holds the total.

Integer scans are exact (wrapping adds, associative). Float scans add in another order
than the CPU's serial one (a warp's tree, then warp totals, then the carry), so they
differ from the reference within rounding (the tests' tolerances). The carry starts at
-0.0 (x + -0.0 is x, so an inclusive scan's first element is x[0] exactly) for an
inclusive scan and at 0 for an exclusive one (whose first element is 0, as the CPU's).

float16 scans (which the CPU computes as per-element float32 prefix sums: already
parallel) and a bad axis (a run-time failure) keep the CPU template's nests.
"""
import numpy as np
from llvmlite import ir

from graphc.compiler.backends.gpu.loop import grid_stride_loop, make_emitter, report_errors
from graphc.compiler.backends.gpu.launches import LaunchLayout, blocks_for, walk
from graphc.compiler.backends.gpu.reduce import block_warps, delinearize
from graphc.compiler.backends.gpu.threads import WARP
from graphc.compiler.loops import LOOP_RULES
from graphc.compiler.loops.emitter import main_node
from graphc.compiler.loops.expr import loaded_storages
from graphc.compiler.loops.views import KernelViews
from kernels import dtypes as kd
from kernels.loops import I64, entry_alloca, for_range


def scan_launches(program, kernel, name, block):
    """The scan launch of a Cumsum kernel, or None where the CPU template's nests stay
    (float16, a bad axis: see the module doc)."""
    node = main_node(kernel, "Cumsum")
    x, axis_t = node.inputs
    out = node.outputs[0]
    dtype = out.dtype.name
    stores = program.stores_of(out)
    views = KernelViews(set(), program.storage_of, program.error_site, LOOP_RULES)
    rank = len(out.dims)
    axis_value = np.asarray(views.constant(axis_t))
    if dtype == "float16" or not stores or axis_value.ndim != 0 or \
            not -rank <= int(axis_value) < rank:
        return None
    axis = int(axis_value) % rank
    vx = views.x
    loop = [vx.var(vx.dim(d), f"scan{k}") for k, d in enumerate(out.dims)]
    element = [i for _, i in loop]
    size = vx.dim(out.dims[axis])
    if node.attrs["reverse"]:  # as the CPU template: the axis runs backwards
        element[axis] = vx.sub(vx.sub(size, vx.const(1)), element[axis])
    value = views.view(x, element)
    position = vx.linear(element, out.dims)
    loads = [s for e in walk([value, position]) for s in loaded_storages(e)]
    lines = 1
    for k, d in enumerate(out.dims):
        if k != axis:
            lines = lines * d
    n = out.dims[axis]
    threads = block if not isinstance(n, int) else \
        min(block, max(WARP, (n + WARP - 1) // WARP * WARP))
    layout = LaunchLayout(name + "_scan", emit_scan_launch, views, [],
                      list(dict.fromkeys(loads + list(stores))), blocks_for(lines, 1), threads)
    layout.details.update(
        dtype=dtype, exclusive=bool(node.attrs["exclusive"]), size=size, value=value,
        position=position, stores=list(stores), axis_var=loop[axis][0],
        line_vars=[v for k, (v, _) in enumerate(loop) if k != axis and v is not None])
    return [layout]


def _c(v):
    return ir.Constant(I64, v)


def emit_scan_launch(t, program, layout, scalar_ops):
    """The body of a scan launch (see the module doc)."""
    b = t.b
    d = layout.details
    dtype, exclusive = d["dtype"], d["exclusive"]
    ty = kd.llvm_type(dtype)
    is_float = kd.is_float(dtype)
    add = b.fadd if is_float else b.add
    identity = ir.Constant(ty, -0.0 if is_float else 0)
    start_carry = ir.Constant(ty, 0.0 if is_float else 0) if exclusive else identity
    buffers = dict(zip(layout.storages, t.args))
    warps = (layout.block + WARP - 1) // WARP
    totals = t.shared(ty, 2 * warps, "totals")
    mine = t.private(ty, "scan")
    got = t.private(ty, "scan.shuffled")
    below = t.private(ty, "scan.below") if exclusive else None
    carry = t.private(ty, "carry")

    uniform = make_emitter(t, program, layout.views, {}, None)
    extents = [uniform.value(v.extent) for v in d["line_vars"]]
    n = uniform.value(d["size"])
    lines = _c(1)
    for e in extents:
        lines = b.mul(lines, e)
    chunks = b.udiv(b.add(n, b.sub(t.ntid, _c(1))), t.ntid, name="chunks")

    def emitter(line_values, j):
        em = make_emitter(t, program, layout.views, buffers, scalar_ops)
        for v, value in line_values + ([(d["axis_var"], j)] if d["axis_var"] else []):
            em.var_values[v.id] = value
            em.defined.add(v.id)
        return em

    def total_at(index):
        return b.load(b.gep(totals, [index], source_etype=ty), typ=ty)

    with grid_stride_loop(b, t.ctaid, t.nctaid, lines, "line") as line:
        line_values = delinearize(b, line, d["line_vars"], extents)
        turn = b.udiv(b.sub(line, t.ctaid), t.nctaid)  # lines this block scanned before
        with for_range(b, chunks, name="chunk") as chunk:
            parity = b.and_(b.add(b.mul(turn, chunks), chunk), _c(1))
            half = b.mul(parity, _c(warps), name="half")
            first = b.mul(chunk, t.ntid, name="chunk.first")

            offsets = [k for k in (1, 2, 4, 8, 16) if k < min(layout.block, WARP)]

            def store_total(tid):  # the warp's last lane: its warp's total
                lane, count = t.warp_lanes(tid)
                with b.if_then(b.icmp_signed("==", lane, b.sub(count, _c(1)))):
                    slot = b.gep(totals, [b.add(half, b.lshr(tid, _c(5)))], source_etype=ty)
                    b.store(b.load(mine.at(tid), typ=ty), slot)

            with t.threads() as tid:
                old = b.load(carry.at(tid), typ=ty)
                b.store(b.select(b.icmp_signed("==", chunk, _c(0)), start_carry, old),
                        carry.at(tid))
                b.store(identity, mine.at(tid))
                j = b.add(first, tid)
                with b.if_then(b.icmp_signed("<", j, n)):
                    em = emitter(line_values, j)
                    b.store(em.value(d["value"]), mine.at(tid))
                    report_errors(t, em)
                if not offsets:
                    store_total(tid)

            for k in offsets:
                t.shuffle_up([mine], k, [got])
                with t.threads() as tid:
                    lane = t.warp_lanes(tid)[0]
                    with b.if_then(b.icmp_unsigned(">=", lane, _c(k))):
                        b.store(add(b.load(got.at(tid), typ=ty), b.load(mine.at(tid), typ=ty)),
                                mine.at(tid))
                    if k == offsets[-1]:
                        store_total(tid)
            if exclusive:  # the lane below's inclusive sum (read after the barrier)
                t.shuffle_up([mine], 1, [below])
            t.barrier()

            with t.threads() as tid:
                lane = t.warp_lanes(tid)[0]
                warp = b.lshr(tid, _c(5))
                acc = entry_alloca(b, ty, "prefix")
                b.store(b.load(carry.at(tid), typ=ty), acc)
                with for_range(b, warp, name="before") as w:
                    b.store(add(b.load(acc, typ=ty), total_at(b.add(half, w))), acc)
                prefix = b.load(acc, typ=ty)
                if exclusive:
                    lower = add(prefix, b.load(below.at(tid), typ=ty))
                    result = b.select(b.icmp_signed("==", lane, _c(0)), prefix, lower)
                else:
                    result = add(prefix, b.load(mine.at(tid), typ=ty))
                j = b.add(first, tid)
                with b.if_then(b.icmp_signed("<", j, n)):
                    em = emitter(line_values, j)
                    position = em.value(d["position"])
                    for storage in d["stores"]:
                        ptr = kd.element_pointer(b, buffers[storage], position, dtype)
                        kd.store_scalar(b, result, ptr, dtype)
                    report_errors(t, em)
                with for_range(b, block_warps(t), start=warp, name="after") as w:
                    b.store(add(b.load(acc, typ=ty), total_at(b.add(half, w))), acc)
                b.store(b.load(acc, typ=ty), carry.at(tid))
