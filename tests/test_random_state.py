"""Random-op state is lowered explicitly: lowering declares each random op's [k0, k1, runs]
array (graphc/framework/random_state.py) as a module variable and names it in the node's
attrs, so passes keep it and the executable reads and writes it, with no op-name suffix
matching downstream."""
import numpy as np

import graphc as gc
from graphc.compiler import lower
from graphc.compiler.backends import cpu as cpu_backend
from graphc.compiler.driver import schedule_module
from graphc.compiler.ir import STATE_VARIABLE
from graphc.framework.random_state import random_op_name, random_state_name


def test_lowering_declares_each_random_ops_state_as_a_module_variable():
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    y = x * gc.random_uniform([3], seed=4, name="u") + gc.random_normal([1], seed=5)
    module = lower([x], [y], [], [(5, 3)])
    randoms = [n for n in module.nodes if n.type in ("RandomUniform", "RandomStandardNormal")]
    assert len(randoms) == 2
    for node in randoms:
        name = node.attrs[STATE_VARIABLE]
        assert name == random_state_name(node.name) and random_op_name(name) == node.name
        ref = module.variables[name]
        assert ref.dtype == gc.int64 and ref.dims == (3,)
    schedule_module(module)  # prune keeps the states of the random ops that stay
    states = {n.attrs[STATE_VARIABLE] for n in randoms}
    assert states <= set(module.variables) and states <= module.variables_used()
    spec = cpu_backend.generate(module)
    flags = {v["name"]: (v["read"], v["written"]) for v in spec["variables"]}
    assert all(flags[s] == (True, True) for s in states)


def test_compiled_runs_continue_the_reference_stream():
    u = gc.random_uniform([4, 5], seed=3, name="u")
    with gc.Session(config=gc.ConfigProto(backend="reference")) as ref:
        want = [ref.run(u) for _ in range(3)]
    with gc.Session() as sess:
        first = sess.run(u)
        with sess.as_default():
            rest = [u.eval() for _ in range(2)]
    for w, g in zip(want, [first] + rest):
        np.testing.assert_array_equal(g, w)
    assert not np.array_equal(want[0], want[1])
