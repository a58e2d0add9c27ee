"""constant_folding: evaluate once, at compile time, what depends only on constants.

Rewrites: a node whose inputs are all Const nodes, and which is pure (its OpDef is not
`stateful` and does not `use_context`: never variables, assigns, random ops; Parameters
are never constants), is run with its op's NumPy reference kernel and replaced by one
Const per output. Nodes are visited in order, so whole constant subgraphs fold in one
run; nodes left without users are deleted.

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
from graphc.reference_executor import run_kernel

MAX_FOLDED_BYTES = 4 << 20
EXPANDING_BYTES = 64 << 10


def run(module):
    counts = {"folded": 0, "too_big": 0, "kernel_errors": 0}
    for node in list(module.nodes):
        if not _foldable(node):
            continue
        args = [v.node.attrs["value"] for v in node.inputs]
        try:
            results = run_kernel(node, args, None)
        except errors.OpError:
            counts["kernel_errors"] += 1
            continue
        if _too_big(results, args):
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
    return all(isinstance(v, Value) and v.node.type == "Const" for v in node.inputs)


def _too_big(results, args):
    out_bytes = sum(np.asarray(r).nbytes for r in results)
    in_bytes = sum(np.asarray(a).nbytes for a in args)
    return out_bytes > MAX_FOLDED_BYTES or (out_bytes > EXPANDING_BYTES and out_bytes > in_bytes)


def _const_name(node, i):
    return node.name if len(node.outputs) == 1 else f"{node.name}:{i}"
