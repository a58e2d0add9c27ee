"""The target-neutral loop layer: what every backend lowers a kernel through.

Each value of a kernel is a *view*, index -> scalar expression (expr.py, views.py), built
by its op's rule (LOOP_RULES: op_lowering.py for elementwise ops, index remaps and
reductions, window_rules.py for pooling, convolutions as direct loops and their
gradients, random.py for the Philox samples of random ops). Backends turn the views into
code: backends/cpu into x86 loop nests, backends/gpu into PTX launches.
"""
from graphc.compiler.loops import random, window_rules
from graphc.compiler.loops.op_lowering import LOOP_RULES
from graphc.compiler.loops.views import LoweringError

LOOP_RULES.update(window_rules.LOOP_RULES)
LOOP_RULES.update(random.LOOP_RULES)

__all__ = ["LOOP_RULES", "LoweringError"]
