"""gradcheck: symbolic gradients against central finite differences, in float64."""
import numpy as np

import graphc as gc


def run_graph(fn, *arrays, feed_dtype=None):
    """Builds fn(*placeholders) in a fresh graph and runs it on `arrays`; returns the result."""
    g = gc.Graph()
    with g.as_default():
        phs = [gc.placeholder(gc.as_dtype(feed_dtype or np.asarray(a).dtype), np.shape(a))
               for a in arrays]
        out = fn(*phs)
        with gc.Session(graph=g) as sess:
            return sess.run(out, dict(zip(phs, arrays)))


def check_gradients(fn, inputs, eps=1e-6, rtol=1e-5, atol=1e-7, seed=0, wrt=None):
    """Asserts that gc.gradients of sum(fn(*xs) * W) matches central differences.

    fn maps placeholders (float64, the shapes of `inputs`) to one tensor. W is a fixed
    random weighting so that every output element matters. `wrt` picks the inputs to
    check (default: all)."""
    inputs = [np.array(a, dtype=np.float64) for a in inputs]  # contiguous private copies
    wrt = range(len(inputs)) if wrt is None else wrt
    rng = np.random.default_rng(seed)
    g = gc.Graph()
    with g.as_default():
        phs = [gc.placeholder(gc.float64, a.shape, name=f"x{i}") for i, a in enumerate(inputs)]
        y = fn(*phs)
        sess = gc.Session(graph=g)
        feed = dict(zip(phs, inputs))
        weights = gc.constant(rng.standard_normal(_output_shape(sess, y, feed)))
        loss = gc.reduce_sum(gc.cast(y, gc.float64) * weights)
        grads = gc.gradients(loss, [phs[i] for i in wrt])
        # an IndexedSlices (a gather's params) is compared as the dense tensor it stands for
        analytic = sess.run([gc.convert_to_tensor(gr) if gr is not None
                             else gc.zeros_like(phs[i]) for gr, i in zip(grads, wrt)], feed)
        for k, i in enumerate(wrt):
            numeric = np.zeros_like(inputs[i])
            flat = inputs[i].reshape(-1)
            for j in range(flat.size):
                orig = flat[j]
                flat[j] = orig + eps
                up = sess.run(loss, feed)
                flat[j] = orig - eps
                down = sess.run(loss, feed)
                flat[j] = orig
                numeric.reshape(-1)[j] = (up - down) / (2 * eps)
            np.testing.assert_allclose(
                analytic[k], numeric, rtol=rtol, atol=atol,
                err_msg=f"gradient w.r.t. input {i} (shape {inputs[i].shape}) differs from "
                        "central differences")
        sess.close()
    return grads


def _output_shape(sess, y, feed):
    """The shape of y: its static one when inference gave every dim (a run of y alone
    would compile a signature for nothing else), else that of its value."""
    if isinstance(y, gc.Tensor) and y.shape.is_fully_defined():
        return tuple(y.shape.as_list())
    return np.shape(sess.run(y, feed))


def check_second_order(fn, inputs, **kwargs):
    """Checks the gradients of the gradients: d/dx of sum_i d(sum fn)/dx_i * V_i."""
    rng = np.random.default_rng(kwargs.pop("seed", 1))

    def first_grad(*xs):
        y = fn(*xs)
        gs = gc.gradients(gc.reduce_sum(y), list(xs))
        total = None
        for gr, x in zip(gs, xs):
            if gr is None:
                continue
            term = gc.reduce_sum(gr * gc.constant(rng.standard_normal(x.shape.as_list())))
            total = term if total is None else total + term
        return total

    return check_gradients(first_grad, inputs, **kwargs)
