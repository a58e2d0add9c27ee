"""The target-neutral loop layer: what every backend lowers a kernel through.

Each value of a kernel is a *view*, index -> scalar expression (expr.py, views.py), built
by its op's rule (LOOP_RULES: op_lowering.py for elementwise ops, index remaps and
reductions, window_rules.py for pooling, convolutions as direct loops and their
gradients, random.py for the Philox samples of random ops); a kernel's store targets are
grouped into loop nests (emitter.py), or built by its op (OPAQUE_NESTS: Cumsum's scan,
the scatters). program.py says where each value lives and builds the spec's common
fields; products.py holds a product kernel's facts. Backends turn the nests into code with
emitter.Emitter: backends/cpu into x86 loop nests, backends/gpu into PTX launches.
"""
from graphc.compiler.loops import random, window_rules
from graphc.compiler.loops.op_lowering import EXP_OF_EACH_INPUT, LOOP_RULES
from graphc.compiler.loops.scan import cumsum_nests
from graphc.compiler.loops.scatter import gather_grad_nests, scatter_nests
from graphc.compiler.loops.views import LoweringError

LOOP_RULES.update(window_rules.LOOP_RULES)
LOOP_RULES.update(random.LOOP_RULES)

# ops whose kernel's nests a function of its own builds, `(program, kernel, rules) ->
# (views, nests)`, rather than one loop rule per element
OPAQUE_NESTS = {
    "Cumsum": cumsum_nests,
    "GatherGrad": gather_grad_nests,
    "ScatterUpdate": scatter_nests,
    "ScatterAdd": scatter_nests,
    "ScatterSub": scatter_nests,
}

__all__ = ["EXP_OF_EACH_INPUT", "LOOP_RULES", "OPAQUE_NESTS", "LoweringError"]
