"""prune (dead code elimination): keep only what the outputs and the side effects need.

Rewrites:
- NoOp nodes (groups of control dependencies) disappear: a root that is a NoOp is
  replaced by the nodes it waits for, and a control dependency on a NoOp by the NoOp's
  own control dependencies.
- Nodes that no output and no root needs, through data inputs or control dependencies,
  are deleted; so are the variables no remaining node reads or updates.
Guarantees: the outputs' values and every side effect (assigns, random draws) are
unchanged; Parameters are kept (they are the module's interface) even when unused; the
remaining nodes keep their order.
"""


def run(module):
    noops = [n for n in module.nodes if n.type == "NoOp"]
    for noop in noops:  # in order, so a NoOp waiting on a NoOp sees it already flattened
        _bypass_noop(module, noop)
    dead = module.remove_dead()
    unused = set(module.variables) - module.variables_used()
    for name in unused:
        del module.variables[name]
    return {"noops_removed": len(noops), "nodes_removed": dead - len(noops),
            "variables_removed": len(unused)}


def _bypass_noop(module, noop):
    for user in list(noop.control_users):
        module.remove_control_dep(user, noop)
        for dep in noop.control_deps:
            module.add_control_dep(user, dep)
    if noop in module.roots:
        module.roots = list(dict.fromkeys(
            r for root in module.roots for r in (noop.control_deps if root is noop else [root])))
