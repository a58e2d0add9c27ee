"""PTX text from an NVPTX LLVM module (llvmlite's bundled LLVM back end).

`emit_ptx(llvm_ir, arch)`: O3, cpu = arch (e.g. "sm_80"), no features, which gives PTX
ISA 7.0: what the installed ptxas (CUDA 13) accepts for sm_80 up to sm_120. Generated
kernels call no external functions (transcendentals are inline polynomials, the rest
are NVPTX intrinsics), so the PTX assembles on its own.
"""
import llvmlite.binding as llvm

GPU_TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_80"

_initialized = False


def _initialize():
    global _initialized
    if not _initialized:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _initialized = True


def emit_ptx(llvm_ir, arch=DEFAULT_ARCH):
    """PTX text of an NVPTX LLVM module (O3, cpu `arch`, no features: PTX ISA 7.0)."""
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
