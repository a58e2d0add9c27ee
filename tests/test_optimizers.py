"""Optimizers against NumPy re-implementations of TF1's update rules; slots, the global
step, learning-rate schedules."""
import numpy as np
import pytest

import graphc as gc


def f32(x):
    """A Python float hyperparameter as the graph sees it: a float32 constant."""
    return float(np.float32(x))


# ------------------------------------------------------- NumPy reference update rules
# Each maker returns step(var, grad, state, t) -> new var; state is a per-variable dict.
def ref_sgd(lr):
    def step(var, g, s, t):
        return var - f32(lr) * g
    return step


def ref_momentum(lr, momentum, nesterov=False):
    def step(var, g, s, t):
        s["accum"] = s.get("accum", 0.0) * f32(momentum) + g
        if nesterov:
            return var - (g * f32(lr) + s["accum"] * f32(momentum) * f32(lr))
        return var - f32(lr) * s["accum"]
    return step


def ref_adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8):
    def step(var, g, s, t):
        # beta1_power / beta2_power are float32 variables multiplied once per step
        b1p, b2p = np.float32(beta1), np.float32(beta2)
        for _ in range(t - 1):
            b1p, b2p = b1p * np.float32(beta1), b2p * np.float32(beta2)
        lr_t = f32(lr) * np.sqrt(1 - float(b2p)) / (1 - float(b1p))
        s["m"] = f32(beta1) * s.get("m", 0.0) + (1 - f32(beta1)) * g
        s["v"] = f32(beta2) * s.get("v", 0.0) + (1 - f32(beta2)) * g * g
        return var - lr_t * s["m"] / (np.sqrt(s["v"]) + f32(eps))
    return step


def ref_rmsprop(lr, decay=0.9, momentum=0.0, eps=1e-10, centered=False):
    def step(var, g, s, t):
        s["ms"] = s.get("ms", 1.0) + (g * g - s.get("ms", 1.0)) * (1 - f32(decay))
        denom = s["ms"]
        if centered:
            s["mg"] = s.get("mg", 0.0) + (g - s.get("mg", 0.0)) * (1 - f32(decay))
            denom = s["ms"] - s["mg"] ** 2
        s["mom"] = s.get("mom", 0.0) * f32(momentum) + f32(lr) * g / np.sqrt(denom + f32(eps))
        return var - s["mom"]
    return step


def ref_adagrad(lr, init=0.1):
    def step(var, g, s, t):
        s["acc"] = s.get("acc", init) + g * g  # filled in the variable's dtype
        return var - f32(lr) * g / np.sqrt(s["acc"])
    return step


CASES = {
    "sgd": (lambda: gc.train.GradientDescentOptimizer(0.1), ref_sgd(0.1)),
    "momentum": (lambda: gc.train.MomentumOptimizer(0.1, 0.9), ref_momentum(0.1, 0.9)),
    "nesterov": (lambda: gc.train.MomentumOptimizer(0.05, 0.7, use_nesterov=True),
                 ref_momentum(0.05, 0.7, nesterov=True)),
    "adam": (lambda: gc.train.AdamOptimizer(0.01), ref_adam(0.01)),
    "adam_custom": (lambda: gc.train.AdamOptimizer(0.1, beta1=0.8, beta2=0.95, epsilon=1e-3),
                    ref_adam(0.1, 0.8, 0.95, 1e-3)),
    "rmsprop": (lambda: gc.train.RMSPropOptimizer(0.01), ref_rmsprop(0.01)),
    "rmsprop_momentum": (lambda: gc.train.RMSPropOptimizer(0.02, decay=0.8, momentum=0.5,
                                                           epsilon=1e-4),
                         ref_rmsprop(0.02, 0.8, 0.5, 1e-4)),
    "rmsprop_centered": (lambda: gc.train.RMSPropOptimizer(0.02, momentum=0.3, epsilon=0.1,
                                                           centered=True),
                         ref_rmsprop(0.02, 0.9, 0.3, 0.1, centered=True)),
    "adagrad": (lambda: gc.train.AdagradOptimizer(0.3), ref_adagrad(0.3)),
    "adagrad_init": (lambda: gc.train.AdagradOptimizer(0.1, initial_accumulator_value=0.5),
                     ref_adagrad(0.1, 0.5)),
}


@pytest.mark.parametrize("dtype,rtol", [(gc.float32, 2e-5), (gc.float64, 1e-12)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_updates_match_numpy_reference(case, dtype, rtol):
    make_opt, ref_step = CASES[case]
    rng = np.random.default_rng(0)
    init = [rng.standard_normal([7]), rng.standard_normal([1]), rng.standard_normal([3, 5])]
    var_list = [gc.Variable(v.astype(dtype.np), name=f"v{i}") for i, v in enumerate(init)]
    grads = [gc.placeholder(dtype, v.shape) for v in init]
    opt = make_opt()
    train = opt.apply_gradients(zip(grads, var_list))
    expected = [v.astype(dtype.np).astype(np.float64) for v in init]
    states = [{} for _ in init]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for t in range(1, 5):
            g_vals = [rng.standard_normal(v.shape).astype(dtype.np) for v in init]
            sess.run(train, dict(zip(grads, g_vals)))
            expected = [ref_step(e, g.astype(np.float64), s, t)
                        for e, g, s in zip(expected, g_vals, states)]
            got = sess.run(var_list)
            for gv, ev in zip(got, expected):
                assert gv.dtype == dtype.np
                np.testing.assert_allclose(gv, ev, rtol=rtol, atol=rtol * 1e-2,
                                           err_msg=f"{case} step {t}")


@pytest.mark.parametrize("make_opt", [
    lambda: gc.train.GradientDescentOptimizer(0.1),
    lambda: gc.train.MomentumOptimizer(0.05, 0.9),
    lambda: gc.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True),
    lambda: gc.train.AdamOptimizer(0.1),
    lambda: gc.train.RMSPropOptimizer(0.05),
    lambda: gc.train.RMSPropOptimizer(0.02, momentum=0.5, centered=True),
    lambda: gc.train.AdagradOptimizer(1.0),
], ids=["sgd", "momentum", "nesterov", "adam", "rmsprop", "rmsprop_centered", "adagrad"])
def test_minimize_reduces_quadratic_loss(make_opt):
    target = np.array([[1.0, -2.0, 3.0], [0.5, 0.0, -1.5]], np.float32)
    w = gc.Variable(np.zeros([2, 3], np.float32), name="w")
    b = gc.Variable(np.float32(4.0), name="b")
    loss = gc.reduce_sum(gc.square(w - target)) + gc.square(b + 1.0)
    train = make_opt().minimize(loss)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        first = sess.run(loss)
        for _ in range(150):
            sess.run(train)
        last = sess.run(loss)
    assert last < first / 100, (first, last)


def test_minimize_increments_global_step_after_updates():
    gs = gc.train.get_or_create_global_step()
    w = gc.Variable([1.0, 2.0], name="w")
    opt = gc.train.GradientDescentOptimizer(0.5)
    train = opt.minimize(gc.reduce_sum(gc.square(w)), global_step=gs)
    assert isinstance(train, gc.Operation) and train.name == "GradientDescent"
    assert train.type == "AssignAdd" and train in gc.get_collection(gc.GraphKeys.TRAIN_OP)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for _ in range(3):
            sess.run(train)
        assert sess.run(gs) == 3
        np.testing.assert_allclose(sess.run(w), [0.0, 0.0])  # w -= 0.5 * 2w


def test_train_op_without_global_step_is_named_after_optimizer():
    w = gc.Variable(1.0, name="w")
    train = gc.train.MomentumOptimizer(0.1, 0.9).minimize(gc.square(w), name="my_train")
    assert train.name == "my_train" and train.type == "NoOp"


@pytest.mark.parametrize("make_opt,names,slot_names", [
    (lambda: gc.train.GradientDescentOptimizer(0.1), [], []),
    (lambda: gc.train.MomentumOptimizer(0.1, 0.9), ["w/Momentum"], ["momentum"]),
    (lambda: gc.train.AdamOptimizer(), ["beta1_power", "beta2_power", "w/Adam", "w/Adam_1"],
     ["m", "v"]),
    (lambda: gc.train.RMSPropOptimizer(0.1), ["w/RMSProp", "w/RMSProp_1"], ["momentum", "rms"]),
    (lambda: gc.train.RMSPropOptimizer(0.1, centered=True),
     ["w/RMSProp", "w/RMSProp_1", "w/RMSProp_2"], ["mg", "momentum", "rms"]),
    (lambda: gc.train.AdagradOptimizer(0.1), ["w/Adagrad"], ["accumulator"]),
])
def test_slot_variables_named_like_tf(make_opt, names, slot_names):
    w = gc.Variable(np.ones([2, 3], np.float32), name="w")
    opt = make_opt()
    opt.minimize(gc.reduce_sum(w * w))
    assert [v.op.name for v in opt.variables()] == names
    assert opt.get_slot_names() == slot_names
    for v in opt.variables():
        assert not v.trainable and v in gc.global_variables()
    assert gc.trainable_variables() == [w]
    for s in slot_names:
        slot = opt.get_slot(w, s)
        assert slot.shape.as_list() == [2, 3] and slot.dtype == gc.float32
    assert opt.get_slot(w, "nope") is None


def test_slot_initial_values():
    w = gc.Variable(np.ones([3], np.float64), name="w")
    rms = gc.train.RMSPropOptimizer(0.1, centered=True)
    ada = gc.train.AdagradOptimizer(0.1, initial_accumulator_value=0.25)
    adam = gc.train.AdamOptimizer(beta1=0.7, beta2=0.8)
    for opt in (rms, ada, adam):
        opt.minimize(gc.reduce_sum(w * w))
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(rms.get_slot(w, "rms")), [1.0] * 3)
        np.testing.assert_array_equal(sess.run(rms.get_slot(w, "mg")), [0.0] * 3)
        np.testing.assert_array_equal(sess.run(ada.get_slot(w, "accumulator")), [0.25] * 3)
        beta1_power, beta2_power = adam._get_beta_accumulators()
        assert beta1_power.dtype == gc.float32  # as TF1: from the Python float beta1
        np.testing.assert_allclose(sess.run([beta1_power, beta2_power]), [0.7, 0.8], rtol=1e-7)


def test_adam_reuses_beta_powers_and_slots_across_minimize_calls():
    w = gc.Variable([1.0], name="w")
    opt = gc.train.AdamOptimizer(0.1)
    opt.minimize(gc.reduce_sum(w * w))
    opt.minimize(gc.reduce_sum(gc.square(w - 1.0)))
    assert [v.op.name for v in opt.variables()] == ["beta1_power", "beta2_power", "w/Adam",
                                                    "w/Adam_1"]
    other = gc.train.AdamOptimizer(0.1)
    other.minimize(gc.reduce_sum(w * w))
    assert [v.op.name for v in other.variables()] == ["beta1_power_1", "beta2_power_1",
                                                      "w/Adam_2", "w/Adam_3"]


def test_beta_powers_advance_once_per_step():
    a = gc.Variable([1.0], name="a")
    b = gc.Variable([2.0], name="b")
    opt = gc.train.AdamOptimizer(0.1, beta1=0.5, beta2=0.25)
    train = opt.minimize(gc.reduce_sum(a * b))
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(train)
        sess.run(train)
        np.testing.assert_allclose(sess.run(opt._get_beta_accumulators()), [0.125, 0.25 ** 3])


def test_var_list_restricts_updates_and_none_grads_are_skipped():
    w = gc.Variable([1.0, 1.0], name="w")
    u = gc.Variable([5.0], name="u")
    loss = gc.reduce_sum(w * w) + gc.reduce_sum(u * u)
    train = gc.train.GradientDescentOptimizer(0.25).minimize(loss, var_list=[w])
    unused = gc.Variable([3.0], name="unused")
    opt = gc.train.MomentumOptimizer(0.1, 0.5)
    grads_and_vars = opt.compute_gradients(gc.reduce_sum(u * 2.0), var_list=[u, unused])
    assert grads_and_vars[1][0] is None and grads_and_vars[1][1] is unused
    apply = opt.apply_gradients(grads_and_vars)
    assert opt.get_slot(unused, "momentum") is None
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(train)
        np.testing.assert_allclose(sess.run(w), [0.5, 0.5])
        np.testing.assert_allclose(sess.run(u), [5.0])
        sess.run(apply)
        np.testing.assert_allclose(sess.run(u), [4.8])
        np.testing.assert_allclose(sess.run(unused), [3.0])


def test_compute_gradients_values_default_var_list():
    w = gc.Variable([1.0, -2.0, 3.0], name="w")
    frozen = gc.Variable([1.0], trainable=False, name="frozen")
    loss = gc.reduce_sum(gc.square(w)) * frozen[0]
    grads_and_vars = gc.train.AdamOptimizer().compute_gradients(loss)
    assert [v for _, v in grads_and_vars] == [w]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        np.testing.assert_allclose(sess.run(grads_and_vars[0][0]), [2.0, -4.0, 6.0])


def test_learning_rate_tensor_and_callable():
    w = gc.Variable([10.0], name="w")
    lr = gc.placeholder(gc.float32, [])
    train = gc.train.GradientDescentOptimizer(lr).minimize(gc.reduce_sum(w))
    v = gc.Variable([10.0], name="v")
    train_v = gc.train.GradientDescentOptimizer(lambda: gc.constant(2.0)).minimize(
        gc.reduce_sum(v))
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(train, {lr: 1.0})
        sess.run(train, {lr: 3.0})
        sess.run(train_v)
        np.testing.assert_allclose(sess.run([w, v]), [[6.0], [8.0]])


def test_float32_learning_rate_tensor_is_cast_for_float64_variables():
    w = gc.Variable(np.array([1.0], np.float64), name="w")
    train = gc.train.MomentumOptimizer(gc.constant(0.5), 0.0).minimize(gc.reduce_sum(w * w))
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(train)
        assert sess.run(w)[0] == 0.0


def test_unknown_shape_variable_gets_slots_shaped_at_run_time():
    w = gc.Variable(np.ones(3, np.float32), validate_shape=False, name="w")
    g = gc.placeholder(gc.float32, [None])
    opt = gc.train.MomentumOptimizer(1.0, 0.5)
    train = opt.apply_gradients([(g, w)])
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(train, {g: [1.0, 2.0, 3.0]})
        sess.run(train, {g: [1.0, 2.0, 3.0]})
        np.testing.assert_allclose(sess.run(w), [1 - 1 - 1.5, 1 - 2 - 3, 1 - 3 - 4.5])


def test_errors():
    w = gc.Variable([1.0], name="w")
    opt = gc.train.GradientDescentOptimizer(0.1)
    with pytest.raises(ValueError, match="No gradients provided"):
        opt.minimize(gc.constant(1.0) * 2.0, var_list=[w])
    with pytest.raises(ValueError, match="No gradients provided"):
        opt.apply_gradients([(None, w)])
    with pytest.raises(ValueError, match="No variables provided"):
        opt.apply_gradients([])
    with pytest.raises(ValueError, match="Invalid type"):
        opt.compute_gradients(gc.constant(3), var_list=[w])
    with pytest.raises(TypeError, match="not a gc.Variable"):
        opt.apply_gradients([(gc.constant([1.0]), gc.constant([2.0]))])
    with pytest.raises(ValueError, match="initial_accumulator_value must be positive"):
        gc.train.AdagradOptimizer(0.1, initial_accumulator_value=0.0)
    with pytest.raises(ValueError, match="Must specify the optimizer name"):
        gc.train.AdamOptimizer(name="")
    with gc.Graph().as_default():
        with pytest.raises(ValueError, match="No variables to optimize"):
            gc.train.AdamOptimizer().minimize(gc.constant(1.0))


def test_graph_can_be_finalized_after_minimize():
    w = gc.Variable([3.0], name="w")
    train = gc.train.AdamOptimizer(0.1).minimize(gc.reduce_sum(w * w))
    init = gc.global_variables_initializer()
    gc.get_default_graph().finalize()
    with gc.Session() as sess:
        sess.run(init)
        for _ in range(3):
            sess.run(train)
        assert sess.run(w)[0] < 3.0


# ------------------------------------------------------------------------ global step
def test_global_step_creation_and_lookup():
    assert gc.train.get_global_step() is None
    gs = gc.train.get_or_create_global_step()
    assert gs.op.name == "global_step" and gs.dtype == gc.int64 and gs.shape.as_list() == []
    assert not gs.trainable
    assert gc.get_collection(gc.GraphKeys.GLOBAL_STEP) == [gs] and gs in gc.global_variables()
    assert gc.train.get_or_create_global_step() is gs and gc.train.get_global_step() is gs
    with pytest.raises(ValueError, match="already exists"):
        gc.train.create_global_step()
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        assert gc.train.global_step(sess, gs) == 0


def test_global_step_in_another_graph():
    g = gc.Graph()
    gs = gc.train.create_global_step(g)
    assert gs.graph is g and gc.train.get_global_step(g) is gs
    assert gc.train.get_global_step() is None


# --------------------------------------------------------------- learning-rate decay
def _eval_at_steps(make_lr, steps, dtype=gc.int64):
    step = gc.placeholder(dtype, [])
    lr = make_lr(step)
    with gc.Session() as sess:
        return lr, np.array([sess.run(lr, {step: s}) for s in steps])


STEPS = [0, 1, 7, 10, 25, 99]


@pytest.mark.parametrize("staircase", [False, True])
def test_exponential_decay(staircase):
    lr, got = _eval_at_steps(lambda s: gc.train.exponential_decay(
        0.1, s, decay_steps=10, decay_rate=0.5, staircase=staircase), STEPS)
    p = np.array(STEPS) / 10.0
    expected = 0.1 * 0.5 ** (np.floor(p) if staircase else p)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert lr.dtype == gc.float32 and lr.op.name == "ExponentialDecay"


def test_exponential_decay_float64_and_variable_step():
    gs = gc.train.get_or_create_global_step()
    lr = gc.train.exponential_decay(gc.constant(0.2, gc.float64), gs, 3, 0.96)
    train = gc.train.GradientDescentOptimizer(lr).minimize(
        gc.reduce_sum(gc.Variable([1.0]) * 1.0), global_step=gs)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for _ in range(5):
            sess.run(train)
        assert lr.dtype == gc.float64
        assert sess.run(lr) == pytest.approx(0.2 * 0.96 ** (5 / 3), rel=1e-14)
    with pytest.raises(ValueError, match="global_step is required"):
        gc.train.exponential_decay(0.1, None, 10, 0.5)


@pytest.mark.parametrize("staircase", [False, True])
def test_inverse_time_and_natural_exp_decay(staircase):
    p = np.array(STEPS) / 10.0
    p = np.floor(p) if staircase else p
    _, inv = _eval_at_steps(lambda s: gc.train.inverse_time_decay(0.1, s, 10, 0.5, staircase),
                            STEPS)
    np.testing.assert_allclose(inv, 0.1 / (1 + 0.5 * p), rtol=1e-6)
    _, nat = _eval_at_steps(lambda s: gc.train.natural_exp_decay(0.1, s, 10, 0.5, staircase),
                            STEPS)
    np.testing.assert_allclose(nat, 0.1 * np.exp(-0.5 * p), rtol=1e-6)


@pytest.mark.parametrize("cycle", [False, True])
def test_polynomial_decay(cycle):
    _, got = _eval_at_steps(lambda s: gc.train.polynomial_decay(
        0.1, s, 10, end_learning_rate=0.01, power=2.0, cycle=cycle), STEPS)
    expected = []
    for s in STEPS:
        steps = 10 * max(1, np.ceil(s / 10)) if cycle else 10
        s = s if cycle else min(s, 10)
        expected.append((0.1 - 0.01) * (1 - s / steps) ** 2 + 0.01)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_piecewise_constant():
    lr, got = _eval_at_steps(lambda s: gc.train.piecewise_constant(
        s, [5, 10], [1.0, 0.5, 0.1]), [0, 5, 6, 10, 11, 99], dtype=gc.int32)
    np.testing.assert_allclose(got, [1.0, 1.0, 0.5, 0.5, 0.1, 0.1])
    with pytest.raises(ValueError, match="1 less than"):
        gc.train.piecewise_constant(gc.constant(1), [5], [1.0])
    with pytest.raises(ValueError, match="same dtype"):
        gc.train.piecewise_constant(gc.constant(1), [5], [1.0, 2])
    with pytest.raises(ValueError, match="Boundaries"):
        gc.train.piecewise_constant(gc.constant(1), [5.5], [1.0, 2.0])
