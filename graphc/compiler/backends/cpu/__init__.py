"""The CPU backend: a fused, memory-planned Module -> one LLVM module (x86 code, BLAS calls,
the thread team) + the executable spec.

    spec = generate(module)              # module.kernels, module.memory_plan set
    exe = runtime.executable.Executable(spec)
    outputs = exe.run(feed_arrays, variables)

One LLVM function per distinct kernel (in `module.kernels`, the schedule: kernels equal up
to their buffers share one, kernel_reuse.py before emitting and dedupe.py after, as do
kernels that differ only in the row of a split they read, whose pointer the entry moves,
or in an index offset, which they take as arguments), and the entry
`int32 graphc_main(feeds, fetches, variables, constants, arena, syms)` that calls them in
order with pointers to their buffers (loops/program.py says where each value lives,
entry.py emits the entry); unknown dims
are read from `syms` and computed as i64 arithmetic of the SymDim expressions.

Kernel kinds and their lowering (the table KERNEL_LOWERINGS):
- "loop" (loop_kernel.py): every value is a *view*, index -> scalar expression
  (loops/expr.py, loops/views.py), built by the op's rule in loops.LOOP_RULES; the
  kernel's stores are loop nests over the output dims (loops/emitter.py), reductions are
  inner loops hoisted to the outermost level where they are defined, the innermost loop
  is the contiguous last dim; outermost loops are split across the thread team
  (parallel.py).
- "gemm" (gemm_kernel.py): a BLAS sgemm/dgemm call (a loop of them for batched
  products), then the elementwise epilogue as a loop over the output, in place.
  Integer products have no BLAS and are lowered as loop kernels.
- "conv" (conv_kernel.py): im2col into a per-image scratch buffer + BLAS gemm (col2im
  for the input gradient), then the epilogue; direct loop rules for non-BLAS types;
  few-channel NHWC convs through conv_direct.py's register tiles over padded images.
- "opaque": nests built per op type (loops.OPAQUE_NESTS: Cumsum's scan, GatherGrad's
  scatter-add, the row scatters), else the op's loop rule (pooling and its gradients in
  gather form, MirrorPadGrad, InvertPermutation: loops/window_rules.py) as a one-node
  loop kernel.
- graphc.distribute's MpiAllreduce and MpiBroadcast, where they compile (a job of
  several ranks): calls into the MPI library (collectives.py).
- random ops (loops/random.py) are loop rules computing Philox samples; every lowering is
  wrapped so that a kernel computing them counts the run in the Session state.

HOW TO ADD AN OP
- Elementwise: give it a scalar emitter in kernels/scalar_ops.py (SCALAR_OPS); the
  elementwise rule picks it up from ELEMENTWISE_OP_TYPES, broadcasting included.
- Anything a loop can compute element by element (index remaps, reductions, random ops
  computed from (seed, counter, index)): write `rule(v, node, k, index) -> Expr` in
  loops/op_lowering.py and add it to LOOP_RULES; see that module's docstring for the
  toolkit. Both backends pick it up.
- An op whose nests a rule per element cannot give (a scan, a scatter): a
  `<op>_nests(program, kernel, rules) -> (views, nests)` in loops/, in OPAQUE_NESTS.
- An op needing its own CPU template (conv, gemm): write
  `lower_<kind>_kernel(program, kernel, name, scalar_ops, rules) -> (llvm function,
  storage keys)` in its own module here (gemm_kernel.py is the model: a prologue that
  calls a library or emits loops directly, then the epilogue through the loop machinery)
  and register it in KERNEL_LOWERINGS under the kernel kind fusion gives it.
"""
from graphc.compiler.backends.cpu.collectives import COLLECTIVE_LOWERINGS
from graphc.compiler.backends.cpu.control_flow import lower_region_kernel
from graphc.compiler.backends.cpu.conv_kernel import lower_conv_kernel
from graphc.compiler.backends.cpu.dedupe import merge_identical_kernels, merge_offset_kernels
from graphc.compiler.backends.cpu.entry import cpu_spec, emit_entry
from graphc.compiler.backends.cpu.gemm_kernel import has_blas_gemm, lower_gemm_kernel
from graphc.compiler.backends.cpu.kernel_reuse import KernelReuse
from graphc.compiler.backends.cpu.math_library import ScalarOpsWithSharedMath, shares_math
from graphc.compiler.backends.cpu.loop_kernel import emit_nests, lower_loop_kernel
from graphc.compiler.backends.cpu.scratch import scratch_bytes
from graphc.compiler.backends.cpu.tensor_arrays import TENSOR_ARRAY_LOWERINGS
from graphc.compiler.loops import LOOP_RULES, OPAQUE_NESTS
from graphc.compiler.loops import random as random_codegen
from graphc.compiler.loops.program import Program
from graphc.compiler.loops.views import LoweringError
from kernels import scalar_ops
from runtime import jit

__all__ = ["generate", "CpuBackend", "LoweringError", "LOOP_RULES", "KERNEL_LOWERINGS"]


def _lower_gemm_or_loop(program, kernel, name, scalar_ops, rules):
    if has_blas_gemm(kernel):
        return lower_gemm_kernel(program, kernel, name, scalar_ops, rules)
    return lower_loop_kernel(program, kernel, name, scalar_ops, rules)


def _emitted(nests_of):
    """The lowering of an op whose nests loops/ builds (OPAQUE_NESTS)."""
    def lower(program, kernel, name, scalar_ops, rules):
        views, nests = nests_of(program, kernel, rules)
        return emit_nests(program, name, views, nests, scalar_ops)
    return lower


OPAQUE_LOWERINGS = {op_type: _emitted(nests_of) for op_type, nests_of in OPAQUE_NESTS.items()}


def _lower_opaque(program, kernel, name, scalar_ops, rules):
    main = kernel.main if getattr(kernel, "main", None) is not None else kernel.nodes[0]
    lower = OPAQUE_LOWERINGS.get(main.type, lower_loop_kernel)
    return lower(program, kernel, name, scalar_ops, rules)


KERNEL_LOWERINGS = {kind: random_codegen.with_random(lower) for kind, lower in {
    "loop": lower_loop_kernel,
    "gemm": _lower_gemm_or_loop,
    "conv": lower_conv_kernel,
    "opaque": _lower_opaque,
}.items()}


def generate(module, target=None, profile=False):
    """The executable spec (plain data, design doc section 6) of a fused, planned module.

    target: {"triple", "cpu", "features"}; default the host (runtime.jit.host_target).
    profile: the entry counts each kernel's cycles (spec["profile_kernels"] names them)."""
    dynamic = module.dynamic_values()
    if dynamic:  # never guess a size: loops and buffers need every dim
        raise LoweringError("the dims of " + ", ".join(
            f"{v.node.describe().splitlines()[0]}" for v in dynamic[:3]) +
            " depend on run-time data")
    program = Program(module)
    calls, names = lower_kernels(program)
    emit_entry(program, calls, profile=profile)
    llvm_ir = merge_offset_kernels(merge_identical_kernels(str(program.llvm)))
    spec = cpu_spec(program, llvm_ir, target or jit.host_target())
    if profile:
        spec["profile_kernels"] = names
    return spec


def lower_kernels(program, prefix=""):
    """[(function, storage keys)] of the program's kernels in schedule order, and their
    names with what they compute. prefix: of the function names (a body's kernels go
    into the LLVM module of the code that calls them: control_flow.py)."""
    reuse = KernelReuse(program)
    calls, names = [], []
    for number, kernel in enumerate(program.module.kernels):
        lower = KERNEL_LOWERINGS.get(kernel.kind)
        if kernel.main is not None and kernel.main.regions:
            lower = _lower_region
        elif kernel.main is not None and kernel.main.type in TENSOR_ARRAY_LOWERINGS:
            # host-only ops in the registry, native where graphc/compiler/regions.py says
            lower = TENSOR_ARRAY_LOWERINGS[kernel.main.type]
        elif kernel.main is not None and kernel.main.type in COLLECTIVE_LOWERINGS:
            # host-only ops in the registry, native where graphc.distribute says so
            lower = COLLECTIVE_LOWERINGS[kernel.main.type]
        if lower is None:
            raise LoweringError(f"no codegen for {kernel.kind} kernels yet "
                                f"({', '.join(n.type for n in kernel.nodes)})")
        name = f"{prefix}kernel_{number}_{_label(kernel)}"
        calls.append(reuse.lower(lower, kernel, name, _scalar_ops_of(kernel), LOOP_RULES))
        names.append(f"{name} [{kernel.kind}: {', '.join(n.type for n in kernel.nodes)}]")
    return calls, names


def _scalar_ops_of(kernel):
    """What the kernel's elementwise ops are emitted with: loop kernels small enough call
    the module's shared exp/tanh/sigmoid functions (math_library.py). Not gemm and conv
    kernels: their epilogues may be straight-line tile code, where no loop vectorizer
    would turn the calls into vector calls."""
    if kernel.kind == "loop" and shares_math(kernel):
        return ScalarOpsWithSharedMath(scalar_ops)
    return scalar_ops


def _lower_region(program, kernel, name, scalar_ops, rules):
    """A native While or If: its bodies' kernels are lowered as these are; it reads and
    grows the values on the heap through their headers."""
    fn, keys = lower_region_kernel(program, kernel, name, lower_kernels)
    program.header_readers.add(fn)
    return fn, keys


def _label(kernel):
    name = getattr(kernel, "name", None) or (kernel.nodes[0].type if kernel.nodes else "k")
    return "".join(c if c.isalnum() else "_" for c in str(name))[:40]


class CpuBackend:
    """The CPU target as the compile driver (graphc/compiler/driver.py) sees it: the
    scratch memory each kernel needs (a convolution's im2col columns), then the spec."""

    scratch_bytes = staticmethod(scratch_bytes)
    strided_products = True  # gemm_team's BLAS calls take a view's offsets and strides

    @staticmethod
    def generate(module, target, options):
        return generate(module, target, profile=options.profile)
