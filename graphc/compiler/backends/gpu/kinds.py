"""Which launches each kernel becomes, by kind (see the package doc for the choices)."""
from llvmlite import ir

from graphc.compiler.backends.gpu.gemm import GEMM_DTYPES, THREADS, TILE, emit_gemm_launch
from graphc.compiler.backends.gpu.loop import emit_loop_launch
from graphc.compiler.backends.gpu.launches import (GpuCodegenNotImplemented, LaunchLayout,
                                               blocks_for, dim_max, gpu_nests, launch_groups,
                                               parallel_elements)
from graphc.compiler.backends.gpu.reduce import (emit_row_launch, row_block, row_count,
                                                 row_reductions)
from graphc.compiler.backends.gpu.scan import scan_launches
from graphc.compiler.loops import LOOP_RULES, OPAQUE_NESTS
from graphc.compiler.loops import random as random_codegen
from graphc.compiler.loops.emitter import kernel_targets, storages_used
from graphc.compiler.loops.products import product_buffer, product_node
from graphc.compiler.loops.views import KernelViews
from graphc.framework.op_def import RANDOM_OP_TYPES
from kernels.loops import I64


def kernel_launches(program, kernel, name, block):
    """The launches (layout.LaunchLayout) of one kernel of the schedule, in order."""
    launches_of = _LAUNCHES.get(kernel.kind)
    if launches_of is None:
        raise GpuCodegenNotImplemented(f"no GPU codegen for {kernel.kind!r} kernels "
                                       f"({', '.join(n.type for n in kernel.nodes)})")
    return launches_of(program, kernel, name, block) + _count_runs(kernel, name)


def loop_launches(program, kernel, name, block):
    computed = {v for n in kernel.nodes for v in n.outputs}
    views = KernelViews(computed, program.storage_of, program.error_site, LOOP_RULES)
    targets = kernel_targets(program, views, kernel.outputs, kernel.nodes)
    return nest_launches(name, views, gpu_nests(views, targets), block)


def gemm_launches(program, kernel, name, block):
    """Float products: the tiled template, then the epilogue nests (loop template) over
    the product in place, as the CPU gemm kernel does; other types: the matmul loop
    rule (one thread per output element)."""
    node = product_node(kernel)
    product = node.outputs[0]
    if product.dtype.name not in GEMM_DTYPES:
        return loop_launches(program, kernel, name, block)
    epilogue = [n for n in kernel.nodes if n is not node]
    c_key, extra = product_buffer(program, product, epilogue)
    keys = [c_key] + [program.storage_of(v) for v in node.inputs]
    tiles = 1
    for d in product.dims[:-2]:
        tiles = tiles * d
    tiles = tiles * ((product.dims[-2] + (TILE - 1)) // TILE) * \
        ((product.dims[-1] + (TILE - 1)) // TILE)
    launch = LaunchLayout(name + "_gemm", emit_gemm_launch, None, [], list(dict.fromkeys(keys)),
                        blocks_for(tiles, 1), THREADS)
    launch.details.update(node=node, keys=keys)

    def storage_of(value):
        return c_key if value is product else program.storage_of(value)
    views = KernelViews({v for n in epilogue for v in n.outputs}, storage_of,
                        program.error_site, LOOP_RULES)
    outputs = [v for v in kernel.outputs if v is not product]
    targets = kernel_targets(program, views, outputs, epilogue, extra)
    return [launch] + nest_launches(name + "_epilogue", views, gpu_nests(views, targets), block)


def opaque_launches(program, kernel, name, block):
    main = getattr(kernel, "main", None) or kernel.nodes[0]
    if main.type == "Cumsum":  # block-parallel scan (scan.py), where it applies
        launches = scan_launches(program, kernel, name, block)
        if launches is not None:
            return launches
    nests_of = OPAQUE_NESTS.get(main.type)
    if nests_of is None:
        return loop_launches(program, kernel, name, block)
    views, nests = nests_of(program, kernel, LOOP_RULES)
    return nest_launches(name, views, nests, block)


def nest_launches(name, views, nests, block):
    """Grid-stride loop launches of `nests`, one per group of independent nests."""
    groups = launch_groups(nests)
    launches = []
    for k, group in enumerate(groups):
        prefix = name if len(groups) == 1 else f"{name}_{k}"
        rows = [(nest, row_reductions(nest, views)) for nest in group]
        others = [nest for nest, reductions in rows if reductions is None]
        if others:
            elements = 1
            for nest in others:
                elements = dim_max(elements, parallel_elements(nest))
            launches.append(LaunchLayout(prefix, emit_loop_launch, views, others,
                                       storages_used(others), blocks_for(elements, block),
                                       block))
        for r, (nest, reductions) in enumerate(x for x in rows if x[1] is not None):
            launches.append(_row_launch(f"{prefix}_rows{r}", views, nest, reductions, block))
    return launches


def _row_launch(name, views, nest, reductions, block):
    threads = row_block(nest, reductions, views, block)
    layout = LaunchLayout(name, emit_row_launch, views, [nest], storages_used([nest]),
                      blocks_for(row_count(nest), 1), threads)
    layout.details["reductions"] = reductions
    return layout


def _count_runs(kernel, name):
    """After a kernel with random ops: one thread adds 1 to each op's run counter (the
    CPU's random.count_runs), so the next run draws new numbers."""
    keys = list(dict.fromkeys(random_codegen.state_storage(n) for n in kernel.nodes
                              if n.type in RANDOM_OP_TYPES))
    if not keys:
        return []
    return [LaunchLayout(name + "_count_runs", _emit_count_runs, None, [], keys, 1, 1)]


def _emit_count_runs(t, program, layout, scalar_ops):
    b = t.b
    with t.threads() as tid:
        zero = ir.Constant(I64, 0)
        first = b.and_(b.icmp_signed("==", tid, zero), b.icmp_signed("==", t.ctaid, zero))
        with b.if_then(first):
            for state in t.args:
                ptr = b.gep(state, [ir.Constant(I64, 2)], source_etype=I64)
                b.store(b.add(b.load(ptr, typ=I64), ir.Constant(I64, 1)), ptr)


_LAUNCHES = {
    "loop": loop_launches,
    "gemm": gemm_launches,
    "conv": loop_launches,      # the direct window rules: one thread per output element
    "opaque": opaque_launches,
}
