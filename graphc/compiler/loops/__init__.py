"""The target-neutral loop layer: what every backend lowers a kernel through.

Each value of a kernel is a *view*, index -> scalar expression (expr.py, views.py), built
by its op's rule (LOOP_RULES: op_lowering.py for elementwise ops, index remaps and
reductions, window_rules.py for pooling, convolutions as direct loops and their
gradients, random.py for the Philox samples of random ops); a kernel's store targets are
grouped into loop nests (emitter.py), or planned by its op (OPAQUE_NESTS: Cumsum's scan,
the scatters). program.py says where each value lives and builds the spec's common
fields; products.py holds a product kernel's facts. Backends turn the nests into code with
emitter.Emitter: backends/cpu into x86 loop nests, backends/gpu into PTX launches.
"""
from graphc.compiler.loops import random, window_rules
from graphc.compiler.loops.op_lowering import LOOP_RULES
from graphc.compiler.loops.scan import plan_cumsum
from graphc.compiler.loops.scatter import plan_gather_grad, plan_scatter
from graphc.compiler.loops.views import LoweringError

LOOP_RULES.update(window_rules.LOOP_RULES)
LOOP_RULES.update(random.LOOP_RULES)

# ops whose kernel is planned by a function of its own, `plan(program, kernel, rules) ->
# (views, nests)`, rather than by one loop rule per element
OPAQUE_NESTS = {
    "Cumsum": plan_cumsum,
    "GatherGrad": plan_gather_grad,
    "ScatterUpdate": plan_scatter,
    "ScatterAdd": plan_scatter,
    "ScatterSub": plan_scatter,
}

__all__ = ["LOOP_RULES", "OPAQUE_NESTS", "LoweringError"]
