"""Kernels: the units of generated code, set by the fusion pass as `module.kernels`.

A Kernel computes some IR nodes in one go. `module.kernels` is the schedule: kernels run in
list order, each reading its `inputs` (feeds, constants, variables, earlier kernels'
outputs) and writing its `outputs` to memory.

  kind     "loop": one loop nest over `dims` computing elementwise, index, random and
           reduction nodes and variable updates; "gemm": one MatMul/BatchMatMulV2 node
           (`main`) then its elementwise epilogue; "conv": the same with a Conv2D or a
           Conv2D backprop; "opaque": one node with its own codegen template (`main`);
           a row scatter's kernel also computes the cheap nodes producing its updates.
  nodes    the IR nodes it computes, in module order. A cheap node (elementwise/index)
           may be in several kernels: each computes it itself, none writes it.
  inputs   Values it reads that are computed elsewhere (Parameters, Consts, VariableV2
           reads, i.e. the variable's buffer at the time the kernel runs, other kernels'
           outputs), in first-use order. Inputs only read for their dims
           (op_kinds.shape_only_inputs) are not listed.
  outputs  Values it computes that are needed outside it (other kernels, module outputs).
  updates  the Assign/AssignAdd/AssignSub nodes in it: it writes those variables in place.
  dims     the loop shape ("loop"), the main node's output dims otherwise.
  main     the gemm/conv/opaque node; None for loop kernels.
  epilogue the nodes after `main` in a gemm/conv kernel (BiasAdd or Add of a vector, then
           an activation), in order; in an opaque kernel, the nodes other than `main`.
"""
from graphc.compiler.ir import VariableRef, node_text
from graphc.framework.op_def import UPDATE_OPS
from graphc.framework.symbolic import SymDim, as_expr


class Kernel:
    def __init__(self, kind, nodes, inputs, outputs, dims, name, main=None):
        self.kind = kind
        self.nodes = list(nodes)
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.updates = [n for n in self.nodes if n.type in UPDATE_OPS]
        self.dims = None if dims is None else tuple(dims)
        self.name = name
        self.main = main
        self.epilogue = [n for n in self.nodes if n is not main] if main is not None else []

    @property
    def updated_variables(self):
        """Names of the variables this kernel writes."""
        return [n.inputs[0].name for n in self.updates if isinstance(n.inputs[0], VariableRef)]

    def to_text(self):
        dims = "" if self.dims is None else " " + format_dims(self.dims)
        head = f"kernel {self.name} {self.kind}{dims}"
        parts = [f"in: {', '.join(v.ref for v in self.inputs) or '-'}",
                 f"out: {', '.join(v.ref for v in self.outputs) or '-'}"]
        if self.updates:
            parts.append("updates: " + ", ".join("&" + n for n in self.updated_variables))
        lines = [head + " (" + "; ".join(parts) + ") {"]
        lines.extend("  " + node_text(n) for n in self.nodes)
        lines.append("}")
        return "\n".join(lines)

    __str__ = to_text

    def __repr__(self):
        return f"<Kernel {self.name} {self.kind} {len(self.nodes)} nodes>"


def kernels_to_text(kernels):
    """The schedule as text, one block per kernel."""
    return "\n".join(k.to_text() for k in kernels) + "\n"


def format_dims(dims):
    return "[" + ",".join(str(d) for d in dims) + "]"


# --------------------------------------------------------------------- dims
# Dims are ints, SymDim expressions, or (from older lowering) symbol strings. These
# helpers compare them by structure only: they never decide on a hint, so they never
# add a guard.
def dim_is(d, n):
    """True when dim d is the constant n."""
    if isinstance(d, SymDim):
        return d.constant() == n
    return not isinstance(d, str) and d is not None and d == n


def dim_equal(a, b):
    if type(a) is int and type(b) is int:
        # static dims, nearly all of them: fusion compares dims in every check of every
        # candidate merge, and the SymDim subtraction below cost a third of its time
        return a == b
    if isinstance(a, str) or isinstance(b, str):  # symbol names: equal names, equal sizes
        return a == b
    if a is None or b is None:
        return False
    return (as_expr(a) - as_expr(b)).constant() == 0


def dims_equal(a, b):
    if a is None or b is None:
        return False
    return len(a) == len(b) and all(dim_equal(x, y) for x, y in zip(a, b))
