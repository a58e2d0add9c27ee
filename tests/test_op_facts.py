"""An op's compiler facts are declared where the op is defined (register_op), and every
table of op types the compiler and the executors keep is a view of that registry.

So a new elementwise op is its definition (graphc/ops style: register_op with its facts)
plus its scalar emitter (kernels.scalar_ops.register_scalar_op): nothing else names it,
and it still compiles, fuses into a MatMul epilogue and matches NumPy.
"""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler import lower
from graphc.compiler.backends.cpu import LOOP_RULES, OPAQUE_LOWERINGS
from graphc.compiler.driver import schedule_module
from graphc.compiler.op_kinds import kind_of
from graphc.framework import op_def
from graphc.framework.op_def import (FACTS, HOST_OP_TYPES, KINDS, OP_DEFS, OP_KINDS,
                                     READING_UPDATE_OPS, UPDATE_OPS, register_op)
from kernels import scalar_ops

NEW_OP = "FactsTestSquareLeak"
LOOP_KINDS = ("elementwise", "index", "reduction", "window", "random")


def _square_leak(x):
    """The new activation's NumPy definition: x*x above 0, x/2 below."""
    return np.where(x > 0, x * x, x * x.dtype.type(0.5)).astype(x.dtype)


def _emit_square_leak(c):
    o = c.fops()
    return o.sel(o.cmp(">", c.x, 0.0), o.mul(c.x, c.x), o.mul(c.x, 0.5))


@pytest.fixture
def square_leak():
    """The new op, defined as graphc/ops defines one and removed after the test."""
    register_op(NEW_OP, infer=lambda inputs, a: (inputs[0].shape, inputs[0].dtype),
                kernel=_square_leak, kind="elementwise", epilogue=True)
    scalar_ops.register_scalar_op(NEW_OP, _emit_square_leak)
    try:
        yield lambda x: gc.get_default_graph().create_op(NEW_OP, [x]).outputs[0]
    finally:
        del OP_DEFS[NEW_OP]
        del scalar_ops.SCALAR_OPS[NEW_OP]


def _dense(dtype, act):
    x = gc.placeholder(dtype, [None, 6], name="x")
    w = np.random.default_rng(1).standard_normal((6, 4)).astype(dtype.np)
    b = np.random.default_rng(2).standard_normal(4).astype(dtype.np)
    y = act(gc.nn.bias_add(gc.matmul(x, gc.constant(w)), gc.constant(b)))
    return x, y, w, b


@pytest.mark.parametrize("dtype", [gc.float32, gc.float64], ids=lambda d: d.name)
def test_a_new_activation_fuses_into_the_matmul_epilogue_with_no_other_table(square_leak,
                                                                              dtype):
    x, y, _, _ = _dense(dtype, square_leak)
    module = lower([x], [y], [], [(5, 6)])
    schedule_module(module)
    (kernel,) = module.kernels
    assert kernel.kind == "gemm" and kernel.main.type == "MatMul"
    assert [n.type for n in kernel.epilogue] == ["BiasAdd", NEW_OP]


@pytest.mark.parametrize("backend", ["compiled", "reference", "gpu_emulated"])
@pytest.mark.parametrize("dtype", [gc.float32, gc.float64], ids=lambda d: d.name)
def test_a_new_activation_compiles_and_matches_numpy(square_leak, dtype, backend):
    x, y, w, b = _dense(dtype, square_leak)
    rng = np.random.default_rng(3)
    tol = 1e-5 if dtype == gc.float32 else 1e-12
    with gc.Session(config=gc.ConfigProto(backend=backend)) as sess:
        for batch in (7, 1, 0):  # odd, broadcasting-sized and empty batches
            xv = rng.standard_normal((batch, 6)).astype(dtype.np)
            z = xv.astype(np.float64) @ w.astype(np.float64) + b
            want = np.where(z > 0, z * z, 0.5 * z)
            got = sess.run(y, {x: xv})
            assert got.dtype == dtype.np and got.shape == (batch, 4)
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_every_registered_op_has_consistent_facts():
    for t, d in OP_DEFS.items():
        assert d.kind in KINDS, t
        if d.kind in LOOP_KINDS and not d.host_only:
            assert t in LOOP_RULES, f"{t} ({d.kind}) has no loop rule"
        if d.kind == "opaque" and not d.host_only:
            # an opaque op is its own kernel: a template, or the loop of its rule
            assert t in OPAQUE_LOWERINGS or t in LOOP_RULES, f"{t} has no native lowering"
        if d.kind == "elementwise":
            assert t in scalar_ops.ELEMENTWISE_OP_TYPES or t in LOOP_RULES, t
        if d.epilogue:
            assert d.kind == "elementwise" and t in scalar_ops.ELEMENTWISE_OP_TYPES, t
        if d.broadcasting:
            assert d.kind == "elementwise", t
        if d.updates_variable:
            assert d.stateful and 0 in d.ref_inputs, t
        if d.forwards_input:
            assert d.aliases_input, t
        if d.host_only:
            assert d.kind == "opaque" and t not in OPAQUE_LOWERINGS, t
    # the views read the registry, so they never name an op that is not registered
    for view in (HOST_OP_TYPES, UPDATE_OPS, READING_UPDATE_OPS):
        assert set(view) <= set(OP_DEFS)
    assert set(READING_UPDATE_OPS) < set(UPDATE_OPS)
    assert dict(OP_KINDS) == {t: d.kind for t, d in OP_DEFS.items()}


def test_views_see_an_op_registered_after_they_were_made(square_leak):
    from graphc.compiler.schedule.fusion import ACTIVATIONS
    assert NEW_OP in ACTIVATIONS and OP_KINDS[NEW_OP] == "elementwise"
    x = gc.placeholder(gc.float32, [3])
    module = lower([x], [square_leak(x)], [], [(3,)])
    assert [kind_of(n) for n in module.nodes if n.type == NEW_OP] == ["elementwise"]


@pytest.mark.parametrize("facts, message", [
    ({}, "kind is required"),
    ({"kind": "loopy"}, "kind 'loopy' is not one of"),
    ({"kind": "elementwise", "epilog": True}, "unknown fact epilog"),
    ({"kind": "index", "epilogue": True}, "epilogue activation must be of kind"),
    ({"kind": "state", "updates_variable": "overwrite"}, "needs a stateful op with ref input"),
    ({"kind": "state", "updates_variable": "add", "stateful": True, "ref_inputs": (0,)},
     "updates_variable 'add' is not one of"),
])
def test_register_op_names_the_op_and_the_fact_it_rejects(facts, message):
    with pytest.raises(ValueError, match=message) as e:
        register_op("FactsTestBad", infer=lambda inputs, a: None, kernel=None, **facts)
    assert "FactsTestBad" in str(e.value)
    assert "FactsTestBad" not in OP_DEFS
    assert set(FACTS) >= {"host_only", "epilogue", "updates_variable", "dims_only_inputs"}


def test_selu_constants_have_one_definition():
    from graphc.ops import nn_ops
    from kernels import activation_constants
    assert nn_ops.SELU_ALPHA is activation_constants.SELU_ALPHA
    assert op_def.OP_DEFS["Selu"].epilogue
