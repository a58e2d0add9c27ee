"""The compiler: lowering a run signature to IR, the pass pipeline, code generation.

    module = lower(feeds, fetches, targets, feed_shapes)  # graph -> ir.Module, symbolic dims
    optimize(module)                          # passes/, in pipeline.PASSES order (through
                                              # fusion and memory planning)
    spec = codegen.generate(module)           # LLVM IR + the plain-data executable spec
    runtime.executable.Executable(spec)       # JIT, then .run(feed_arrays, variables)
    interpret(module, feed_arrays, state)     # NumPy reference run of the module (tests)

graphc/compiled_executor.py drives this for the Session; graphc/export.py for files.
"""
from graphc.compiler.interpret import interpret  # noqa: F401
from graphc.compiler.ir import Module, Node, Value, VariableRef  # noqa: F401
from graphc.compiler.lower import lower  # noqa: F401
from graphc.compiler.pipeline import PASSES, optimize  # noqa: F401
