"""GPU codegen, first step: "loop" kernels -> PTX, and the same kernels emulated on the CPU.

    gpu = generate_gpu(module, grid=4, block=128)   # module fused and memory-planned
    gpu.ptx(arch="sm_80")        # PTX text (PTX ISA 7.0 from llvmlite's NVPTX back end)
    gpu.emulation_spec           # a CPU executable spec: runtime.executable.Executable(spec)

No op's math is written here: each loop kernel is planned by the CPU codegen's own
machinery (views, expressions, nests: codegen/loop_kernel.py, op_lowering.LOOP_RULES,
kernels/scalar_ops.py) and emitted by its _Emitter. The one difference is the outermost
loop of each nest, taken over through the emitter's existing outer-loop hook
(`emitter.parallel.emit_loop`, the hook the CPU uses to split loops across threads; no
change to loop_kernel.py was needed): here it becomes a grid-stride loop

    for (i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)

with the inner loops (and reductions hoisted inside the outer loop: a softmax row's max
and sum) run per thread, as on the CPU. Reductions are thread-serial for now (no shared
memory, no warp shuffles: issue 5's later step).

A nest whose outermost loop cannot be shared out (parallel._unsafe's rules: an
accumulating column sum, a store not indexed by that loop, a buffer loaded where it is
not stored) runs whole in global thread 0; so does every nest of a kernel where a nest
loads what an earlier nest of the same kernel stored (no grid-wide barrier inside a
kernel). Those kernels are correct but serial: `GpuKernel.serial_nests` says which.

Kernel signature (both forms):
    PTX:       void name(ptr buf..., ptr syms, ptr status)            nvvm "kernel"
    emulation: void name.emu(ptr buf..., ptr syms, ptr status,
                             i64 tid, i64 ntid, i64 ctaid, i64 nctaid)
`status` (i32) receives the first nonzero error status a thread reaches (atomic
compare-and-swap, so "first" is by time, not by element order as on the CPU).

CPU emulation (MCUDA / PoCL work-item loops): `name.launch(buf..., syms) -> i32` loops over
the blocks and, inside, the threads, calling the same body with the indices as arguments;
the CPU entry (codegen/entry.py's Program.emit_entry, unchanged) calls the launchers in
schedule order. With no shared memory and no barriers yet, a kernel body needs no
splitting at barriers: each thread runs to completion in turn.

Not done (a clear NotImplementedError naming the kernel kind): "gemm", "conv", opaque
templates (Cumsum's scan, GatherGrad's scatter), random ops, float16.
"""
from llvmlite import ir

from graphc.compiler.codegen import LOOP_RULES, OPAQUE_LOWERINGS
from graphc.compiler.codegen import parallel as cpu_parallel
from graphc.compiler.codegen.entry import Program
from graphc.compiler.codegen.loop_kernel import (_accumulated_outputs, _Emitter,
                                                 kernel_targets, plan_nests, storages_used)
from graphc.compiler.codegen.views import KernelViews, LoweringError
from graphc.compiler.op_kinds import OP_KINDS
from kernels.loops import I32, I64, PTR, entry_alloca, for_range

__all__ = ["generate_gpu", "emit_ptx", "GPU_TRIPLE", "GpuModule", "GpuKernel",
           "GpuCodegenNotImplemented"]

GPU_TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_80"
_SREG = "llvm.nvvm.read.ptx.sreg.{}.x"
# what each emulation argument stands for, in order
_INDEX_NAMES = ("tid", "ntid", "ctaid", "nctaid")


class GpuCodegenNotImplemented(LoweringError):
    """A kernel the GPU codegen does not lower yet (its kind is in the message)."""


class GpuKernel:
    """One planned loop kernel: its name, pointer args (storage keys) and nests."""

    def __init__(self, name, kind, views, nests, storages, serial_nests):
        self.name = name
        self.kind = kind
        self.views = views
        self.nests = nests
        self.storages = storages
        self.serial_nests = serial_nests  # indices of nests run by global thread 0 only


class GpuModule:
    """The GPU kernels of one module: the NVPTX LLVM module and the emulation spec."""

    def __init__(self, kernels, llvm_module, emulation_spec, grid, block):
        self.kernels = kernels
        self.llvm_module = llvm_module
        self.emulation_spec = emulation_spec
        self.grid, self.block = grid, block

    @property
    def llvm_ir(self):
        return str(self.llvm_module)

    def ptx(self, arch=DEFAULT_ARCH):
        return emit_ptx(self.llvm_ir, arch)


# ------------------------------------------------------------------ driver
def generate_gpu(module, grid=4, block=128):
    """GPU kernels of a fused, memory-planned module (module.kernels, memory_plan set).

    grid, block: the launch configuration the emulation entry uses (blocks, threads per
    block; one-dimensional)."""
    from kernels import scalar_ops
    from runtime import jit
    dynamic = module.dynamic_values()
    if dynamic:
        raise LoweringError("the dims of " + ", ".join(
            v.node.describe().splitlines()[0] for v in dynamic[:3]) +
            " depend on run-time data")
    program = Program(module)
    gpu_llvm = ir.Module(name=module.name + ".gpu")
    gpu_llvm.triple = GPU_TRIPLE
    annotations = gpu_llvm.add_named_metadata("nvvm.annotations")
    kernels, calls = [], []
    for number, kernel in enumerate(module.kernels):
        name = f"kernel_{number}_{_label(kernel)}"
        plan = plan_gpu_kernel(program, kernel, name)
        kernels.append(plan)
        fn = emit_kernel(gpu_llvm, program, plan, scalar_ops, _sreg_indices)
        annotations.add(gpu_llvm.add_metadata(
            [fn, ir.MetaDataString(gpu_llvm, "kernel"), ir.Constant(I32, 1)]))
        emu = emit_kernel(program.llvm, program, plan, scalar_ops, None)
        calls.append((_emit_launcher(program.llvm, plan, emu, grid, block), plan.storages))
    program.emit_entry(calls)
    spec = program.spec(str(program.llvm), jit.host_target())
    return GpuModule(kernels, gpu_llvm, spec, grid, block)


def _label(kernel):
    name = getattr(kernel, "name", None) or (kernel.nodes[0].type if kernel.nodes else "k")
    return "".join(c if c.isalnum() else "_" for c in str(name))[:40]


def plan_gpu_kernel(program, kernel, name):
    """The views, nests and storages of one kernel (the CPU loop kernel's planning)."""
    _check_supported(kernel)
    computed = {v for n in kernel.nodes for v in n.outputs}
    views = KernelViews(computed, program.storage_of, program.error_site, LOOP_RULES)
    folded, folds, fills = _accumulated_outputs(program, views, kernel)
    stored = [v for v in kernel.outputs if v not in folded]
    targets = kernel_targets(program, views, stored, kernel.nodes) + folds
    nests = plan_nests(views, fills) + plan_nests(views, targets)
    return GpuKernel(name, kernel.kind, views, nests, storages_used(nests),
                     _serial_nests(nests))


def _check_supported(kernel):
    main = getattr(kernel, "main", None) or (kernel.nodes[0] if kernel.nodes else None)
    what = ", ".join(n.type for n in kernel.nodes)
    if kernel.kind in ("gemm", "conv"):
        raise GpuCodegenNotImplemented(
            f"GPU codegen for {kernel.kind!r} kernels is not implemented yet ({what})")
    if kernel.kind == "opaque" and main is not None and main.type in OPAQUE_LOWERINGS:
        raise GpuCodegenNotImplemented(
            f"GPU codegen for 'opaque' kernels with a template ({main.type}) is not "
            f"implemented yet")
    if kernel.kind not in ("loop", "opaque"):
        raise GpuCodegenNotImplemented(f"no GPU codegen for {kernel.kind!r} kernels ({what})")
    for n in kernel.nodes:
        if OP_KINDS.get(n.type) == "random":
            raise GpuCodegenNotImplemented(f"GPU codegen for random ops ({n.type}) in "
                                           f"{kernel.kind!r} kernels is not implemented yet")
        if any(v.dtype.name == "float16" for v in n.outputs):
            raise GpuCodegenNotImplemented(f"GPU codegen for float16 ({n.type}) is not "
                                           f"implemented yet")


def _outer_var(nest):
    return next((v for v in nest.vars if v is not None), None)


def _serial_nests(nests):
    """Indices of the nests that global thread 0 runs alone (see the module doc)."""
    serial = set()
    stored_before = set()
    for k, nest in enumerate(nests):
        var = _outer_var(nest)
        if var is None or cpu_parallel._unsafe(nest, var, nest.targets):
            serial.add(k)
        if _loads(nest) & stored_before:  # needs a grid barrier: everything serial
            return set(range(len(nests)))
        stored_before |= {t.storage for t in nest.targets}
    return serial


def _loads(nest):
    """Storages the nest reads (an accumulating target reads the element it folds into)."""
    out = {t.storage for t in nest.targets if t.accumulate}
    seen, stack = set(), [e for t in nest.targets for e in (t.expr, t.position)]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if e.kind == "load":
            out.add(e.data)
        stack.extend(e.args)
    return out


# ----------------------------------------------------------------- emission
def _sreg_indices(builder, fn):
    """(tid, ntid, ctaid, nctaid) as i64 from the PTX special registers."""
    module = builder.module
    out = []
    for reg in _INDEX_NAMES:
        name = _SREG.format(reg)
        callee = module.globals.get(name) or ir.Function(module, ir.FunctionType(I32, []), name)
        out.append(builder.zext(builder.call(callee, []), I64))
    return out


def emit_kernel(llvm_module, program, plan, scalar_ops, index_source):
    """The kernel function of `plan` in `llvm_module`. index_source(builder, fn) gives the
    thread indices; None: they are the function's last four i64 arguments (emulation)."""
    emulated = index_source is None
    extra = [I64] * 4 if emulated else []
    fnty = ir.FunctionType(ir.VoidType(), [PTR] * (len(plan.storages) + 2) + extra)
    fn = ir.Function(llvm_module, fnty, plan.name + (".emu" if emulated else ""))
    fn.attributes.add("nounwind")
    for arg in fn.args[:len(plan.storages)]:
        arg.add_attribute("noalias")
    syms, status = fn.args[len(plan.storages):len(plan.storages) + 2]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    tid, ntid, ctaid, nctaid = (fn.args[-4:] if emulated else index_source(b, fn))
    first = b.add(b.mul(ctaid, ntid), tid, name="gid")
    stride = b.mul(ntid, nctaid, name="gstride")
    em = _Emitter(b, plan.views, dict(zip(plan.storages, fn.args)), syms,
                  program.emit_dim, scalar_ops)
    grid_stride = _GridStride(first, stride)
    for k, nest in enumerate(plan.nests):
        if k in plan.serial_nests:
            em.parallel = None
            with b.if_then(b.icmp_signed("==", first, ir.Constant(I64, 0))):
                em.scopes.append({})  # values made here do not dominate what follows
                em.emit_nest(nest)
                em.scopes.pop()
        else:
            em.parallel = grid_stride
            em.emit_nest(nest)
    _report_status(b, em, status, syms)
    b.ret_void()
    return fn


class _GridStride:
    """The emitter's outer-loop hook: the nest's outermost loop as a grid-stride loop."""

    def __init__(self, first, stride):
        self.first, self.stride = first, stride

    def emit_loop(self, em, nest, level, by_level, deepest):
        var = nest.vars[level]
        b = em.b
        extent = em.value(var.extent)
        pre = b.block
        header = b.append_basic_block(f"{var.name}.grid.header")
        body = b.append_basic_block(f"{var.name}.grid.body")
        done = b.append_basic_block(f"{var.name}.grid.done")
        b.branch(header)
        b.position_at_end(header)
        i = b.phi(I64, name=var.name)
        i.add_incoming(self.first, pre)
        b.cbranch(b.icmp_signed("<", i, extent), body, done)
        b.position_at_end(body)
        em.var_values[var.id] = i
        em.defined.add(var.id)
        em.scopes.append({})
        em._level(nest, level, by_level, deepest)
        em.scopes.pop()
        em.defined.discard(var.id)
        i.add_incoming(b.add(i, self.stride, flags=("nsw",)), b.block)
        b.branch(header)
        b.position_at_end(done)
        return True


def _report_status(b, em, status, syms):
    """A thread that failed stores its status, if no thread did before it, and then its
    error details into the syms slots (as the CPU kernel's status() does)."""
    if em.error_slot is None:
        return
    mine = b.load(em.error_slot, typ=I32)
    with b.if_then(b.icmp_signed("!=", mine, ir.Constant(I32, 0))):
        old = b.cmpxchg(status, ir.Constant(I32, 0), mine, "monotonic", "monotonic")
        won = b.extract_value(old, 1)
        with b.if_then(won):
            for k, slot in enumerate(em.detail_slots or ()):
                ptr = b.gep(syms, [ir.Constant(I64, em.detail_base + k)], source_etype=I64)
                b.store(b.load(slot, typ=I64), ptr)


def _emit_launcher(llvm_module, plan, emu, grid, block):
    """`i32 name.launch(buf..., syms)`: every block, every thread of it, in turn."""
    fn = ir.Function(llvm_module, ir.FunctionType(I32, [PTR] * (len(plan.storages) + 1)),
                     plan.name + ".launch")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    status = entry_alloca(b, I32, "status")
    b.store(ir.Constant(I32, 0), status)
    nctaid, ntid = ir.Constant(I64, grid), ir.Constant(I64, block)
    with for_range(b, nctaid, name="block") as ctaid:
        with for_range(b, ntid, name="thread") as tid:
            b.call(emu, list(fn.args) + [status, tid, ntid, ctaid, nctaid])
    b.ret(b.load(status, typ=I32))
    return fn


# --------------------------------------------------------------------- PTX
_initialized = False


def _initialize():
    global _initialized
    if not _initialized:
        import llvmlite.binding as llvm
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _initialized = True


def emit_ptx(llvm_ir, arch=DEFAULT_ARCH):
    """PTX text of an NVPTX LLVM module (O3, cpu `arch`, no features: PTX ISA 7.0)."""
    import llvmlite.binding as llvm
    _initialize()
    tm = llvm.Target.from_triple(GPU_TRIPLE).create_target_machine(cpu=arch, features="",
                                                                  opt=3)
    mod = llvm.parse_assembly(llvm_ir)
    mod.triple = GPU_TRIPLE
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_assembly(mod)
