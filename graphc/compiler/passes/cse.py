"""cse (common subexpression elimination): identical computations run once.

Rewrites: two nodes with the same op type, the same attrs (compared exactly: arrays by
dtype, shape and bytes, floats by value and sign), the same inputs and the same control
dependencies compute the same values; every use of the later one reads the earlier one.
Const nodes with equal values merge the same way. Nodes are visited in order and inputs
are merged before their users, so whole duplicated subgraphs collapse in one run.

Reads of one variable (VariableV2 nodes of the same name) merge too when no node between
them updates that variable: they read the same value.

Left alone: other stateful nodes (OpDef.stateful or uses_context): two random_normal ops
draw different numbers, two assigns both update; and two reads with an update of their
variable between them. Parameters are distinct feeds even when equal.
Guarantees: bit-identical results (the earlier node has the same inputs, so it computes
the same values and is defined before every user of the later one); the node order and
all side effects are unchanged.
"""
from graphc.compiler.ir import PARAMETER, Value, VariableRef, attrs_key


def run(module):
    seen = {}
    last_read = {}  # variable name -> its read node, while no update has come since
    merged = reads_merged = 0
    for node in list(module.nodes):
        if node.type == "VariableV2":
            first = last_read.setdefault(node.name, node)
            if first is not node:
                module.replace_node(node, first.outputs)
                reads_merged += 1
            continue
        for v in node.inputs:
            if isinstance(v, VariableRef) and node.has_side_effect:
                last_read.pop(v.name, None)
        if node.type == PARAMETER or node.is_stateful or not node.outputs:
            continue
        key = _key(node)
        first = seen.setdefault(key, node)
        if first is not node:
            module.replace_node(node, first.outputs)
            merged += 1
    return {"merged": merged, "reads_merged": reads_merged,
            "nodes_removed": module.remove_dead()}


def _key(node):
    inputs = tuple((v.node.id, v.index) if isinstance(v, Value) else ("var", v.name)
                   for v in node.inputs)
    # dims are left out: equal type, attrs and inputs imply equal dims
    out_dtypes = tuple(v.dtype.name for v in node.outputs)
    return (node.type, attrs_key(node.attrs), inputs, out_dtypes,
            frozenset(d.id for d in node.control_deps))
