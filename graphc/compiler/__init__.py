"""The compiler: lowering a run signature to IR, the pass pipeline, the IR interpreter.

    module = lower(feeds, fetches, targets)   # graphc tensors/ops -> ir.Module
    optimize(module)                          # passes/, in pipeline.PASSES order
    interpret(module, feed_arrays, state)     # NumPy reference run of the module
"""
from graphc.compiler.interpret import interpret  # noqa: F401
from graphc.compiler.ir import Module, Node, Value, VariableRef  # noqa: F401
from graphc.compiler.lower import lower  # noqa: F401
from graphc.compiler.pipeline import PASSES, optimize  # noqa: F401
