"""Candidate samplers (statistics with a seed) and the sampled losses against their
definitions in NumPy, given the same sampled classes."""
import numpy as np
import pytest

import graphc as gc
from tests.gradcheck import check_gradients

SAMPLERS = {"log_uniform": gc.nn.log_uniform_candidate_sampler,
            "uniform": gc.nn.uniform_candidate_sampler}


def np_probability(kind, k, range_max):
    k = np.asarray(k, dtype=np.float64)
    if kind == "uniform":
        return np.full(k.shape, 1.0 / range_max)
    return (np.log(k + 2) - np.log(k + 1)) / np.log(range_max + 1)


def run(fetches, feed=None):
    with gc.Session() as sess:
        return sess.run(fetches, feed)


# ----------------------------------------------------------------------------- samplers
@pytest.mark.parametrize("kind", SAMPLERS)
def test_sampler_shapes_and_static_inference(kind):
    labels = gc.placeholder(gc.int64, [None, 2])
    sampled, true_ec, sampled_ec = SAMPLERS[kind](labels, 2, 7, True, 11, seed=3)
    assert sampled.shape.as_list() == [7] and sampled.dtype == gc.int64
    assert true_ec.shape.as_list() == [None, 2] and true_ec.dtype == gc.float32
    assert sampled_ec.shape.as_list() == [7] and sampled_ec.dtype == gc.float32
    s, t, e = run([sampled, true_ec, sampled_ec], {labels: [[0, 1], [2, 3], [9, 10]]})
    assert t.shape == (3, 2) and len(set(s.tolist())) == 7
    assert ((0 <= s) & (s < 11)).all()


@pytest.mark.parametrize("kind", SAMPLERS)
def test_sampler_seeded_repeatable_and_fresh_each_run(kind):
    def draw_twice():
        gc.reset_default_graph()
        s = SAMPLERS[kind]([[1]], 1, 5, False, 1000, seed=7)[0]
        with gc.Session() as sess:
            return sess.run(s), sess.run(s)
    a1, a2 = draw_twice()
    b1, b2 = draw_twice()
    np.testing.assert_array_equal(a1, b1)
    np.testing.assert_array_equal(a2, b2)
    assert not np.array_equal(a1, a2)


@pytest.mark.parametrize("kind", SAMPLERS)
def test_sampler_distribution_and_expected_counts_with_replacement(kind):
    range_max, n = 13, 40000
    true_classes = np.array([[0], [4], [12]], dtype=np.int64)
    sampled, true_ec, sampled_ec = run(SAMPLERS[kind](true_classes, 1, n, False, range_max,
                                                      seed=11))
    p = np_probability(kind, np.arange(range_max), range_max)
    freq = np.bincount(sampled, minlength=range_max) / n
    # 5 standard errors of a binomial proportion
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n))
    np.testing.assert_allclose(true_ec, n * np_probability(kind, true_classes, range_max),
                               rtol=1e-5)
    np.testing.assert_allclose(sampled_ec, n * np_probability(kind, sampled, range_max),
                               rtol=1e-5)


@pytest.mark.parametrize("kind", SAMPLERS)
def test_sampler_unique_expected_counts_follow_one_number_of_tries(kind):
    """With unique=True, count(k) = 1 - (1 - p_k)^tries for one tries >= num_sampled."""
    range_max, num_sampled = 50, 20
    true_classes = np.array([[3, 40]], dtype=np.int64)
    sampled, true_ec, sampled_ec = run(SAMPLERS[kind](true_classes, 2, num_sampled, True,
                                                      range_max, seed=5))
    assert len(set(sampled.tolist())) == num_sampled
    p = np_probability(kind, sampled, range_max)
    tries = np.log1p(-sampled_ec.astype(np.float64)) / np.log1p(-p)
    assert tries.min() >= num_sampled - 1e-3
    np.testing.assert_allclose(tries, np.round(tries[0]), rtol=1e-3)
    np.testing.assert_allclose(
        true_ec, -np.expm1(np.round(tries[0]) * np.log1p(-np_probability(kind, true_classes,
                                                                         range_max))),
        rtol=1e-5)


def test_log_uniform_prefers_small_classes():
    sampled = run(gc.nn.log_uniform_candidate_sampler([[0]], 1, 2000, False, 1000, seed=1)[0])
    assert (sampled < 10).mean() > 0.3 and (sampled < 500).mean() > 0.85


def test_sampler_errors():
    with pytest.raises(ValueError, match="range is too small"):
        gc.nn.uniform_candidate_sampler([[0]], 1, 6, True, 5)
    with pytest.raises(ValueError, match="num_true"):
        gc.nn.uniform_candidate_sampler(gc.placeholder(gc.int64, [None, 3]), 2, 2, True, 5)
    with pytest.raises(ValueError):
        gc.nn.uniform_candidate_sampler(gc.placeholder(gc.int64, [4]), 1, 2, True, 5)
    with pytest.raises(TypeError):
        gc.nn.uniform_candidate_sampler(gc.placeholder(gc.int32, [None, 1]), 1, 2, True, 5)


def test_gradients_flow_past_samplers():
    s, t, e = gc.nn.log_uniform_candidate_sampler(gc.constant([[1]], dtype=gc.int64), 1, 3,
                                                  True, 10)
    x = gc.placeholder(gc.float32, [])
    assert gc.gradients(gc.cast(s, gc.float32) * x + t[0, 0] + e[0], [x])[0] is not None


# ----------------------------------------------------------------------------- losses in NumPy
def np_sampled_logits(w, b, labels, x, sampled, true_ec, sampled_ec, remove_hits):
    true_logits = np.einsum("bd,btd->bt", x, w[labels]) + b[labels] - np.log(true_ec)
    sampled_logits = x @ w[sampled].T + b[sampled] - np.log(sampled_ec)
    if remove_hits:
        hits = (labels[:, :, None] == sampled[None, None, :]).any(axis=1)
        sampled_logits = np.where(hits, sampled_logits - np.finfo(np.float32).max,
                                  sampled_logits)
    return true_logits, sampled_logits


def np_nce(true_logits, sampled_logits, num_true):
    def xent(z, y):  # sigmoid cross entropy
        return np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
    return xent(true_logits, 1.0 / num_true).sum(1) + xent(sampled_logits, 0.0).sum(1)


def np_sampled_softmax(true_logits, sampled_logits, num_true):
    z = np.concatenate([true_logits, sampled_logits], 1)
    m = z.max(1, keepdims=True)
    log_softmax = z - m - np.log(np.exp(z - m).sum(1, keepdims=True))
    return -(log_softmax[:, :num_true] / num_true).sum(1)


def problem(rng, batch=3, dim=5, classes=17, num_true=1, num_sampled=6):
    w = rng.standard_normal((classes, dim))
    b = rng.standard_normal(classes)
    x = rng.standard_normal((batch, dim))
    labels = rng.integers(0, classes, (batch, num_true))
    sampled = rng.choice(classes, num_sampled, replace=False)
    sampled[0] = labels[0, 0]  # an accidental hit
    true_ec = rng.uniform(0.1, 0.9, (batch, num_true)).astype(np.float32)
    sampled_ec = rng.uniform(0.1, 0.9, num_sampled).astype(np.float32)
    return w, b, x, labels, sampled, true_ec, sampled_ec


LOSSES = {"nce": (gc.nn.nce_loss, np_nce), "sampled_softmax": (gc.nn.sampled_softmax_loss,
                                                                np_sampled_softmax)}


@pytest.mark.parametrize("num_true", [1, 2])
@pytest.mark.parametrize("remove_hits", [False, True])
@pytest.mark.parametrize("loss", LOSSES)
def test_sampled_losses_match_definition(loss, remove_hits, num_true):
    rng = np.random.default_rng(num_true)
    w, b, x, labels, sampled, true_ec, sampled_ec = problem(rng, num_true=num_true)
    fn, np_fn = LOSSES[loss]
    xp = gc.placeholder(gc.float64, [None, 5])
    out = fn(gc.constant(w), gc.constant(b), labels, xp, num_sampled=6, num_classes=17,
             num_true=num_true, sampled_values=(sampled, true_ec, sampled_ec),
             remove_accidental_hits=remove_hits)
    assert out.shape.as_list() == [3] and out.dtype == gc.float64  # batch from labels
    got = run(out, {xp: x})
    want = np_fn(*np_sampled_logits(w, b, labels, x, sampled, true_ec.astype(np.float64),
                                    sampled_ec.astype(np.float64), remove_hits), num_true)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("loss", LOSSES)
def test_sharded_weights_match_one_table(loss, strategy):
    rng = np.random.default_rng(3)
    w, b, x, labels, sampled, true_ec, sampled_ec = problem(rng)
    n = 3
    if strategy == "mod":
        shards = [w[k::n] for k in range(n)]
        bias_shards = [b[k::n] for k in range(n)]
    else:  # TF's div split: the first 17 % 3 shards get one extra row
        bounds = [0, 6, 12, 17]
        shards = [w[bounds[k]:bounds[k + 1]] for k in range(n)]
        bias_shards = [b[bounds[k]:bounds[k + 1]] for k in range(n)]
    fn = LOSSES[loss][0]
    kw = dict(num_sampled=6, num_classes=17, sampled_values=(sampled, true_ec, sampled_ec))
    sharded = fn([gc.constant(s) for s in shards], [gc.constant(s) for s in bias_shards],
                 labels, gc.constant(x), partition_strategy=strategy, **kw)
    whole = fn(gc.constant(w), gc.constant(b), labels, gc.constant(x), **kw)
    a, c = run([sharded, whole])
    np.testing.assert_allclose(a, c, rtol=1e-12)


@pytest.mark.parametrize("loss", LOSSES)
def test_sampled_loss_gradients(loss):
    rng = np.random.default_rng(4)
    w, b, x, labels, sampled, true_ec, sampled_ec = problem(rng, batch=2, dim=3, classes=7,
                                                            num_true=2, num_sampled=3)
    fn = LOSSES[loss][0]
    check_gradients(lambda wp, bp, xp: fn(wp, bp, labels, xp, 3, 7, num_true=2,
                                          sampled_values=(sampled, true_ec, sampled_ec)),
                    [w, b, x])


def test_nce_loss_uses_seeded_sampler_by_default():
    gc.set_random_seed(1)
    rng = np.random.default_rng(5)
    w, b, x, labels, *_ = problem(rng)
    loss = gc.nn.sampled_softmax_loss(gc.constant(w), gc.constant(b), labels, gc.constant(x),
                                      num_sampled=6, num_classes=17, seed=2)
    ops = [op.type for op in gc.get_default_graph().get_operations()]
    assert "LogUniformCandidateSampler" in ops
    with gc.Session() as sess:
        first = sess.run(loss)
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(loss), first)
    assert np.all(np.isfinite(first))


def test_word2vec_style_training_reduces_nce_loss():
    """Skip-gram-like toy: each word predicts its successor mod vocabulary."""
    vocab, dim, batch = 20, 8, 20
    gc.set_random_seed(3)
    inputs = gc.placeholder(gc.int32, [batch])
    targets = gc.placeholder(gc.int64, [batch, 1])
    embeddings = gc.Variable(gc.random_uniform([vocab, dim], -1.0, 1.0))
    nce_w = gc.Variable(gc.truncated_normal([vocab, dim], stddev=1.0 / np.sqrt(dim)))
    nce_b = gc.Variable(gc.zeros([vocab]))
    embed = gc.nn.embedding_lookup(embeddings, inputs)
    loss = gc.reduce_mean(gc.nn.nce_loss(weights=nce_w, biases=nce_b, labels=targets,
                                         inputs=embed, num_sampled=5, num_classes=vocab))
    train = gc.train.GradientDescentOptimizer(1.0).minimize(loss)
    words = np.arange(batch) % vocab
    feed = {inputs: words, targets: ((words + 1) % vocab)[:, None]}
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        first = np.mean([sess.run(loss, feed) for _ in range(10)])
        for _ in range(150):
            sess.run(train, feed)
        last = np.mean([sess.run(loss, feed) for _ in range(10)])
    assert last < 0.5 * first
