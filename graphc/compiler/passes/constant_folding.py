"""constant_folding: evaluate once, at compile time, what depends only on constants.

Rewrites: a node whose inputs are all Const nodes, and which is pure (its OpDef is not
`stateful` and does not `use_context`: never variables, assigns, random ops; Parameters
are never constants), is run with its op's NumPy reference kernel and replaced by one
Const per output. So are the ops that read only the static shape of an input (Shape,
ShapeN, Size, ZerosLike, OnesLike: when its IR dims are all ints; Rank: when its rank is
known), whatever computes that input (which is then not read: the Shape of an
uninitialized variable no longer fails). Nodes are visited in order, so whole constant
subgraphs fold in one run; nodes left without users are deleted.

Left alone:
- results over MAX_FOLDED_BYTES (4 MiB, one million float32). Folded constants are
  embedded in the generated code and in exported files and are compiled with them: the
  cap keeps those small and compile times short, while covering what graphs really fold
  (shape arithmetic, scaled initial values, small tables).
- results over EXPANDING_BYTES (64 KiB) that are bigger than all their inputs together:
  those are expansions (Fill, BroadcastTo, Tile, Range, OnesLike of a constant) that cost
  as much to read from memory as to compute, so storing them gains nothing
  (algebraic_simplify folds a splat into its consumer instead).
- string results (host-only values) and nodes whose kernel raises: the error is a run
  time error of that node and stays one.
Guarantees: bit-identical results (the same kernel runs, only earlier), side effects
untouched, the control users of a folded node wait for its Const instead.
"""
import numpy as np

from graphc import errors
from graphc.compiler.ir import PARAMETER, Value
from graphc.framework.op_def import READS_ONLY_INPUT_DIMS
from graphc.framework.op_kernel import run_kernel

MAX_FOLDED_BYTES = 4 << 20
EXPANDING_BYTES = 64 << 10


def run(module):
    counts = {"folded": 0, "too_big": 0, "kernel_errors": 0}
    for node in list(module.nodes):
        if not _foldable(node):
            continue
        const_inputs = [v.node.attrs["value"] for v in node.inputs if _is_const(v)]
        if _too_big(_static_nbytes(node), const_inputs):  # before running: it could be huge
            counts["too_big"] += 1
            continue
        try:
            results = run_kernel(node, [_static_value(v) for v in node.inputs], None)
        except errors.OpError:
            counts["kernel_errors"] += 1
            continue
        if _too_big(sum(np.asarray(r).nbytes for r in results), const_inputs):
            counts["too_big"] += 1
            continue
        consts = [module.add_constant(arr, before=node, name=_const_name(node, i),
                                      location=node.location) for i, arr in enumerate(results)]
        module.replace_node(node, consts)
        counts["folded"] += 1
    counts["nodes_removed"] = module.remove_dead()
    return counts


def _foldable(node):
    if node.type in ("Const", PARAMETER) or not node.outputs or node.is_stateful:
        return False
    if any(v.dtype.name == "string" for v in node.outputs):
        return False
    if node.type in READS_ONLY_INPUT_DIMS:  # Rank reads only the rank, the others all dims
        return all(v.dims is not None and (node.type == "Rank" or all(isinstance(d, int)
                                                                      for d in v.dims))
                   for v in node.inputs)
    return all(_is_const(v) for v in node.inputs)


def _is_const(v):
    return isinstance(v, Value) and v.node.type == "Const"


def _static_value(v):
    """The Const's array, or for a shape-only op a zero-memory array of v's shape."""
    if _is_const(v):
        return v.node.attrs["value"]
    dims = [d if isinstance(d, int) else 0 for d in v.dims]  # only "rank" ops get here with symbols
    return np.broadcast_to(np.zeros((), v.dtype.np), dims)


def _static_nbytes(node):
    """The outputs' size in bytes from their IR dims; 0 where a dim is not static."""
    total = 0
    for v in node.outputs:
        if v.dims is None or not all(isinstance(d, int) for d in v.dims):
            return 0
        total += int(np.prod(v.dims, dtype=np.int64)) * v.dtype.size
    return total


def _too_big(out_bytes, const_inputs):
    in_bytes = sum(a.nbytes for a in const_inputs)
    return out_bytes > MAX_FOLDED_BYTES or (out_bytes > EXPANDING_BYTES and out_bytes > in_bytes)


def _const_name(node, i):
    return node.name if len(node.outputs) == 1 else f"{node.name}:{i}"
