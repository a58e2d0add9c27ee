"""GPU codegen: every kernel of a fused, memory-planned module -> PTX, and the same kernels
emulated on the CPU, from the same per-op definitions as the CPU backend (loops/).

    gpu = generate_gpu(module)          # module.kernels and module.memory_plan set
    spec = gpu.spec(arch="sm_80")       # the GPU executable spec (docs/gpu_contract.md)
    gpu.ptx("sm_90")                    # PTX text of every kernel

No op's math is written here. Each kernel is planned by the loop layer (loops/:
KernelViews over loops.LOOP_RULES, expressions emitted through kernels.scalar_ops by
loops.emitter.Emitter) and cut into *launches* (launches.py); each launch is emitted by a
template (loop.py: grid-stride loops; reduce.py: one block per row, reductions by warp
shuffles and one shared-memory step between warps; scan.py: Cumsum, one block per line;
gemm.py: tiled shared-memory products) written once against the thread-program layer
(threads.py), which emits it twice: as a PTX kernel and as its CPU emulation
`<launch>.emulate(args..., syms, status, i64 grid, i64 block)` (MCUDA/PoCL: uniform code
per block, a loop over the threads per region between barriers and shuffles).

Kernel kinds: "loop" and templateless "opaque" kernels (pooling and the other window
rules) go through loop.py, or reduce.py when a nest reduces rows (softmax, layer norm,
row sums and argmax); "gemm" kernels of float32/float64 through gemm.py, other types
through the matmul loop rule; "conv" kernels through the direct loop rules of
loops/window_rules.py (one thread per output element summing over its window: no
scratch memory); Cumsum through scan.py (one block per scanned line: warp shuffles up,
warp totals in shared memory, a carry from chunk to chunk; float16 and a bad axis keep
the loop layer's nests, loops/scan.py), GatherGrad through loops/scatter.py's nests
(atomic adds); While and If as launches of their bodies' kernels driven from the host
(control_flow.py), and a While whose bodies allow it also as one kernel running the
whole loop in one block (device_loop.py), TensorArray ops as grid-stride moves of rows (tensor_arrays.py);
random ops through the Philox loop rule (kernels/philox.py), with a one-thread launch
after the kernel counting the run.
"""
from llvmlite import ir

from graphc.compiler.backends.gpu import kinds
from graphc.compiler.backends.gpu.control_flow import (RegionKernel, all_launches,
                                                       region_scratch_bytes)
from graphc.compiler.backends.gpu.launches import GpuCodegenNotImplemented
from graphc.compiler.backends.gpu.ptx import DEFAULT_ARCH, GPU_TRIPLE, emit_ptx
from graphc.compiler.backends.gpu.spec import gpu_spec
from graphc.compiler.backends.gpu.tensor_arrays import tensor_array_launches
from graphc.compiler.backends.gpu.threads import thread_program
from graphc.compiler.loops import random as random_codegen
from graphc.compiler.loops.program import Program
from graphc.compiler.loops.views import LoweringError
from graphc.compiler.regions import TENSOR_ARRAY_OPS
from kernels import scalar_ops

__all__ = ["generate_gpu", "GpuBackend", "emit_ptx", "GPU_TRIPLE", "DEFAULT_ARCH",
           "GpuModule", "GpuKernel", "GpuCodegenNotImplemented"]

DEFAULT_BLOCK = 256


class GpuKernel:
    """One kernel of the module: its name, kind and launches (layout.LaunchLayout)."""

    def __init__(self, name, kind, launches):
        self.name = name
        self.kind = kind
        self.launches = launches


class GpuModule:
    """The GPU kernels of one module: PTX and emulation LLVM modules, launches, spec."""

    def __init__(self, program, kernels, ptx_module, emulation_module):
        self.program = program
        self.kernels = kernels
        self.llvm_module = ptx_module
        self.emulation_module = emulation_module
        self._ptx = {}

    @property
    def launches(self):
        """Every launch, those of While and If bodies included, in emission order."""
        return [launch for k in self.kernels for launch in all_launches(k)]

    @property
    def llvm_ir(self):
        return str(self.llvm_module)

    @property
    def emulation_ir(self):
        return str(self.emulation_module)

    def ptx(self, arch=DEFAULT_ARCH):
        if arch not in self._ptx:
            self._ptx[arch] = emit_ptx(self.llvm_ir, arch)
        return self._ptx[arch]

    def spec(self, arch=DEFAULT_ARCH, ptx=True):
        """The GPU executable spec (plain data; see docs/gpu_contract.md). ptx=False: no
        PTX (None), for specs only the CPU emulation runs (a fifth of their compile time)."""
        return gpu_spec(self, arch, ptx)


def generate_gpu(module, block=DEFAULT_BLOCK):
    """The GPU kernels of a fused, memory-planned module. block: threads per block of
    the launches whose templates do not fix their own (grid-stride and row kernels)."""
    dynamic = module.dynamic_values()
    if dynamic:
        raise LoweringError("the dims of " + ", ".join(
            v.node.describe().splitlines()[0] for v in dynamic[:3]) +
            " depend on run-time data")
    program = Program(module)
    scalar = random_codegen.ScalarOpsWithRandom(scalar_ops)
    kernels = gpu_kernels(program, block)
    ptx_module = ir.Module(name=module.name + ".gpu")
    ptx_module.triple = GPU_TRIPLE
    emulation_module = ir.Module(name=module.name + ".emulation")
    for launch in (launch for k in kernels for launch in all_launches(k)):
        for llvm_module, nvptx in ((ptx_module, True), (emulation_module, False)):
            t = thread_program(llvm_module, launch.name, len(launch.storages), nvptx)
            launch.template(t, program, launch, scalar)
            t.finish()
    return GpuModule(program, kernels, ptx_module, emulation_module)


def gpu_kernels(program, block, prefix="", in_place=frozenset()):
    """The GPU kernels of the program's schedule, in order: a native While or If becomes a
    RegionKernel whose bodies' kernels are made here too (control_flow.py). in_place: of
    a loop body, the loop variables it writes in the buffer it reads them from."""
    kernels = []
    for number, kernel in enumerate(program.module.kernels):
        name = f"{prefix}kernel_{number}_{_label(kernel)}"
        if kernel.main is not None and kernel.main.regions:
            kernels.append(RegionKernel(program, kernel, name,
                                        lambda body, pre, same: gpu_kernels(body, block, pre,
                                                                            same)))
        elif kernel.main is not None and kernel.main.type in TENSOR_ARRAY_OPS:
            # host-only ops in the registry, native where graphc/compiler/regions.py says
            kernels.append(GpuKernel(name, "tensor_array", tensor_array_launches(
                program, kernel, name, block, in_place)))
        else:
            kernels.append(GpuKernel(name, kernel.kind,
                                     kinds.kernel_launches(program, kernel, name, block)))
    return kernels


def _label(kernel):
    name = getattr(kernel, "name", None) or (kernel.nodes[0].type if kernel.nodes else "k")
    return "".join(c if c.isalnum() else "_" for c in str(name))[:40]


class GpuBackend:
    """The GPU target as the compile driver (graphc/compiler/driver.py) sees it: only While
    and If kernels need scratch memory (their bodies' arenas and loop buffers; convolutions
    are direct loops, one thread per output element), then the spec for target["arch"],
    without PTX when target["ptx"] is False."""

    strided_products = False  # the tiled GEMM reads dense operands (gemm.py)

    @staticmethod
    def scratch_bytes(kernel):
        main = getattr(kernel, "main", None)
        return region_scratch_bytes(main) if main is not None and main.regions else 0

    @staticmethod
    def generate(module, target, options):
        return generate_gpu(module).spec(target["arch"], ptx=target.get("ptx", True))
