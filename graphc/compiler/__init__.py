"""The compiler: one run signature of a graph -> an executable spec, in stages.

    result = driver.compile_signature(feeds, fetches, targets, feed_shapes, target=...)
    runtime.executable.Executable(result.spec)   # or runtime.gpu.GpuExecutable on a device

driver.py runs the stages (the only compile path: Session, gc.export, tools and tests):
    lower(feeds, fetches, targets, feed_shapes)  # graph -> ir.Module, symbolic dims
    optimize(module)                             # passes/, in pipeline.PASSES order
    schedule/                                    # fusion -> kernels, memory planning
    loops/                                       # target-neutral loop lowering (op rules)
    backends/cpu/ or backends/gpu/               # the backend: LLVM IR (CPU) or PTX
    interpret(module, feed_arrays, state)        # NumPy reference run of the module (tests)
"""
from graphc.compiler.interpret import interpret  # noqa: F401
from graphc.compiler.ir import Module, Node, Value, VariableRef  # noqa: F401
from graphc.compiler.lower import lower  # noqa: F401
from graphc.compiler.pipeline import PASSES, optimize  # noqa: F401
